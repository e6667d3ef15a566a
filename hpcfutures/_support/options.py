"""Every option of hpcfutures, declared once.

An :class:`Option` has a name, a :class:`Kind` (what it accepts, what it
resolves to, how it is read from text), a default and a one-line doc.  From
that declaration come:

* its ``HPCFUTURES_<NAME>`` environment variable and its ``hpcfutures.<name>``
  Dask config key (:attr:`Option.env_name`, :attr:`Option.config_key`);
* how :func:`~hpcfutures._support.config.resolve_settings` converts and
  checks a value, from any source;
* the typed keywords and the "Args" entries of ``Executor.__init__`` and of
  ``connect``, and the fields of ``Settings``: source text that static tools
  can read, written between ``BEGIN generated`` / ``END generated`` markers by
  ``python -m hpcfutures._support.option_sources --write`` (a unit test fails
  when it is out of date);
* the options table of the README (same command) and of the documentation
  (``docs/_ext/hpcfutures_docs.py``, at build time).

Nothing here imports Dask at import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .values import (
    to_args,
    to_bool,
    to_callable,
    to_count,
    to_epoch,
    to_margin,
    to_memory,
    to_progress,
    to_seconds,
    to_text,
)

__all__ = [
    "BY_NAME",
    "CONNECT_KEYWORDS",
    "ENV_PREFIX",
    "NAMES",
    "OPTIONS",
    "Kind",
    "Option",
    "given",
]

ENV_PREFIX = "HPCFUTURES_"
CONFIG_SECTION = "hpcfutures"


# ---------------------------------------------------------------- declarations
@dataclasses.dataclass(frozen=True)
class Kind:
    """What sort of value an option takes."""

    #: Annotation of the keyword argument, without ``| None``.
    accepts: str
    #: Annotation of the resolved value in ``Settings``, without ``| None``.
    holds: str
    convert: Callable[[Any], Any]
    #: The accepted values, for the documentation's table (reST inline markup).
    describe: str
    #: A valid value, for error messages.
    example: Any
    #: Whether ``convert`` itself may give None (then the setting is optional).
    may_be_none: bool = False
    #: A sentence on the accepted values for docstrings and the README, if needed.
    hint: str = ""
    #: Whether a value can be written as text: false for Python objects (a callable
    #: and its arguments), which only a keyword argument can give.
    textual: bool = True


BOOL = Kind("bool", "bool", to_bool,
            "boolean: ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``", True)
COUNT = Kind("int", "int", to_count, "whole number, > 0", 4)
SECONDS = Kind("float | str", "float", to_seconds,
               "seconds, > 0: a number or a duration such as ``90s``, ``5min``, ``1h``", "5min",
               hint="Seconds, or a duration such as ``\"90s\"``, ``\"5min\"`` or ``\"1h\"``.")
TEXT = Kind("str", "str", to_text, "text", "text", may_be_none=True)
SIZE = Kind("int | float | str", "int | float | str", to_memory,
            "bytes or a size such as ``4GiB``; ``auto`` or a fraction such as ``0.5``: "
            "Dask's share of the worker's host; ``0``: none", "4GiB", may_be_none=True,
            hint="Bytes, or a size such as ``\"4GiB\"``; ``\"auto\"`` or a fraction such as "
                 "``0.5`` let Dask size it on the worker's host.")
MARGIN = Kind("float | str", "float", to_margin,
              "seconds, >= 0 (``0``: never): a number or a duration such as ``90s``, "
              "``5min``", "5min",
              hint="Seconds, or a duration such as ``\"90s\"`` or ``\"5min\"``.")
EPOCH = Kind("float | str", "float", to_epoch,
             "epoch seconds, or an ISO time such as ``2026-11-30T21:30:00``",
             "2026-11-30T21:30:00",
             hint="Epoch seconds, or an ISO time such as ``\"2026-11-30T21:30:00\"``.")
CALLABLE = Kind("Callable[..., Any]", "Callable[..., Any]", to_callable,
                "a callable (keyword argument only)", "setup_worker", textual=False)
ARGUMENTS = Kind("tuple[Any, ...]", "tuple[Any, ...]", to_args,
                 "a tuple (keyword argument only)", "(path,)", textual=False)
PROGRESS = Kind("bool | str", "str", to_progress,
                "boolean, or ``auto`` (same as true) or ``always``", "auto")


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: its keyword, variable, config key, conversion, default and doc."""

    name: str
    kind: Kind
    default: Any
    #: One sentence or two, reST inline markup only (also rendered as Markdown).
    doc: str
    #: What the default means, when the value alone does not say (e.g. None).
    default_doc: str = ""
    #: Also the first positional parameter of ``Executor`` (``max_workers``, as in
    #: ``ThreadPoolExecutor``).
    positional: bool = False
    #: A valid value for error messages, when the kind's example does not fit.
    example: Any = None

    @property
    def env_name(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def config_key(self) -> str:
        return f"{CONFIG_SECTION}.{self.name.replace('_', '-')}"

    @property
    def optional(self) -> bool:
        """Whether the resolved value may be None."""
        return self.default is None or self.kind.may_be_none

    @property
    def textual(self) -> bool:
        """Whether the option may also come from its variable or the Dask config."""
        return self.kind.textual

    def text_source_refused(self, source: str) -> str:
        """Why this option cannot come from ``source`` (a variable, a config key)."""
        return (f"{self.name!r} cannot come from the {source}: its value is a Python object "
                f"({self.kind.describe.split(' (')[0]}), which text cannot express; pass it "
                f"as a keyword argument, e.g. hpcfutures.Executor({self.name}=...)")

    @property
    def full_doc(self) -> str:
        """The doc and what values it accepts, for docstrings and the README."""
        return f"{self.doc} {self.kind.hint}".strip()

    @property
    def shown_default(self) -> str:
        """The default for people (reST inline markup)."""
        if self.default_doc:
            return self.default_doc
        value = self.default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return f"``{value!r}``"

    def example_for(self, source: str) -> str:
        """How to give a valid value in ``source`` (a keyword, a variable, a config key)."""
        value = self.kind.example if self.example is None else self.example
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if not self.textual:  # only ever a keyword argument: a Python expression
            return f"{self.name}={text}"
        if source.startswith("environment"):
            return f"{self.env_name}={text}"
        if source.startswith("dask config"):
            return f"'{self.name.replace('_', '-')}: {text}' in the {CONFIG_SECTION}: section"
        return f"{self.name}={value!r}"


OPTIONS: tuple[Option, ...] = (
    Option("max_workers", COUNT, None,
           "Worker processes of the laptop default. Under a launcher the workers are the "
           "ranks left after the scheduler and the client.",
           default_doc="one per core", positional=True),
    Option("launcher", TEXT, None,
           "Force a launcher plug-in: a built-in name such as ``local`` (the laptop default), "
           "``run`` (``hpcfutures run``), ``slurm`` or ``mpi`` (``hpcfutures info`` and the "
           "docs list them all), or "
           "``package.module:ClassName`` for your own.",
           default_doc="detected from the environment", example="slurm"),
    Option("timeout", SECONDS, 60.0,
           "How long any start-up wait may take before a StartupTimeoutError."),
    Option("array_timeout", SECONDS, 3600.0,
           "How long job-array elements wait for each other, since the queue may start them "
           "hours apart."),
    Option("scheduler_file", TEXT, None,
           "Where the scheduler's address is exchanged: a path that may use ``{launch_id}``, "
           "``{job_id}`` and ``{user}`` (under Slurm also ``{step_id}`` and ``{cluster}``).",
           default_doc="``~/.hpcfutures/scheduler-{launch_id}.json``"),
    Option("host", TEXT, None,
           "Address the scheduler and workers bind to.",
           default_doc="loopback when the whole launch is on one host, else Dask's default"),
    Option("interface", TEXT, None,
           "Network interface to bind to instead of an address, e.g. ``ib0``.",
           default_doc="none (see ``host``)"),
    Option("threads_per_worker", COUNT, None,
           "Threads in each Dask worker.",
           default_doc="the launcher's CPUs per task, else 1"),
    Option("memory_limit", SIZE, None,
           "Memory limit of each worker, checked when the settings are resolved.",
           default_doc="the worker's share of the job's memory request, else none"),
    Option("scheduler_in_client", BOOL, False,
           "Run the scheduler inside the client process, so no rank is spent on it."),
    Option("security", BOOL, True,
           "TLS with per-launch credentials between all processes. False means plain TCP: "
           "anyone who can reach the scheduler's port can run code as you (only for trusted, "
           "single-user networks)."),
    Option("exit_when_done", BOOL, True,
           "Non-client ranks exit the process when the client is done; if false, "
           "``Executor()`` returns on them and ``__enter__`` gives ``None``."),
    Option("progress", PROGRESS, "off",
           "Progress bar of ``Executor.map`` on stderr (needs tqdm): true or ``auto`` draws it "
           "only when stderr is a terminal, so batch logs stay clean; ``always`` also into a "
           "file or pipe. ``map(..., progress=)`` overrides it per call.",
           default_doc="off"),
    Option("dashboard", BOOL, False,
           "Serve Dask's dashboard from the scheduler (needs bokeh); the client prints its "
           "address and an ``ssh -L`` tunnel command when it starts."),
    Option("dashboard_address", TEXT, "127.0.0.1:8787",
           "Where the dashboard listens, on the scheduler's host: loopback by default, "
           "reached through an ssh tunnel. A taken port is replaced by a free one.",
           example="127.0.0.1:8787"),
    Option("summary", BOOL, False,
           "When the client leaves the ``with`` block, print the calls run and failed, the "
           "calls re-run after a lost worker, each worker's busy time and the wall time."),
    Option("log_dir", TEXT, None,
           "Directory where every rank also writes its own log file, "
           "``<dir>/<launch_id>/rank-<rank>-<role>.log``.",
           default_doc="none (only the tagged output)"),
    Option("release_idle_after", SECONDS, None,
           "After this long idle a worker retires and its rank exits 0, handing its CPUs "
           "and memory back while the launch goes on (useful when each worker is its own "
           "job-array element).",
           default_doc="never"),
    Option("min_workers", COUNT, 1,
           "Workers kept however idle they are, when ``release_idle_after`` is set."),
    Option("end_time", EPOCH, None,
           "When the allocation ends, for a batch system hpcfutures cannot ask (it asks "
           "Slurm, Grid Engine, PBS and LSF itself); the executor drains before it.",
           default_doc="asked of the batch system, else unknown"),
    Option("drain_margin", MARGIN, None,
           "How long before the allocation's end the executor stops sending calls: running "
           "calls finish, calls never started fail with ``TimeLimitError``; ``0`` never "
           "drains (SIGTERM at the end stops the launch, as without a known end).",
           default_doc="twice the longest measured call, at least 30 s"),
    Option("requeue", BOOL, False,
           "When the executor drained with calls left, put the batch job back in the queue "
           "(Slurm ``scontrol requeue``, Grid Engine exit status 99, PBS ``qrerun`` or, for "
           "users PBS refuses that, ``qsub`` of the job again, LSF ``brequeue``), so that a "
           "rerun resumes from the journal."),
    Option("max_requeues", COUNT, 3,
           "Runs in a row that recorded no new result, at most, before a job is no longer "
           "requeued: stops a job that never gets further from looping, and lets one whose "
           "every run adds results go on for as many runs as it needs (within the batch "
           "system's own cap, such as Slurm's ``MaxBatchRequeue``)."),
    Option("journal", TEXT, None,
           "Directory where each finished call's result is recorded, on a filesystem that "
           "later runs see; a later run with the same journal returns the recorded results "
           "instead of running those calls again. May use ``{job_id}`` and ``{user}`` like "
           "``scheduler_file``. See the documentation's page on time limits and resuming.",
           default_doc="none (nothing is recorded)", example="~/journals/sweep"),
    Option("initializer", CALLABLE, None,
           "Called in every worker process before its first call, also in workers that "
           "join later, as ``initializer(*initargs)`` (as with ``ProcessPoolExecutor``). "
           "If it raises, the executor is broken: every pending and later call fails with "
           "``BrokenHPCExecutor``, caused by that exception.",
           default_doc="none"),
    Option("initargs", ARGUMENTS, (),
           "The arguments of ``initializer``."),
)

NAMES: tuple[str, ...] = tuple(option.name for option in OPTIONS)
BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}

#: The options that :func:`hpcfutures.connect`, ``ConnectedExecutor`` and
#: :func:`hpcfutures.stop` take as keywords: a client outside the launch
#: chooses nothing else.
CONNECT_KEYWORDS: tuple[str, ...] = ("timeout", "journal")


def given(namespace: Mapping[str, Any], names: tuple[str, ...] = NAMES) -> dict[str, Any]:
    """The option keywords in a function's ``locals()``: what its caller passed on.

    The functions whose option keywords are generated forward them this way,
    so no hand-written list of options can fall out of step.
    """
    return {name: namespace[name] for name in names if name in namespace}
