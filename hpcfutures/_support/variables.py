"""The ``HPCFUTURES_*`` environment variables that are not options, and the check for
names hpcfutures does not know.

An option's variable is declared with the option (:mod:`.options`); every other
variable hpcfutures reads is listed in :data:`OTHER_VARIABLES`, which the
documentation's table of variables is built from.  A set ``HPCFUTURES_*`` variable
that is neither is a typing mistake as far as hpcfutures can tell:
:func:`warn_unknown_variables` says so once per process, naming the nearest known
name, and ``hpcfutures info`` lists it.  Names under :data:`RESERVED_PREFIXES`
belong to hpcfutures' own tests and benchmarks and are never reported.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping

__all__ = ["OTHER_VARIABLES", "RESERVED_PREFIXES", "describe_unknown", "known_variables",
           "unknown_variables",
           "warn_unknown_variables"]

logger = logging.getLogger("hpcfutures")

#: ``HPCFUTURES_*`` variables that are not options: name -> (default, meaning).
OTHER_VARIABLES = {
    "HPCFUTURES_INTERLEAVE": (
        "unset",
        "For testing only: ``SEED:MAX`` pauses each rank at each step of finding the "
        "scheduler (before it reads the scheduler file, before it connects, while the "
        "scheduler closes) for up to ``MAX`` seconds, drawn from ``SEED``, so that "
        "``benchmarks/interleave.py`` can replay an order of events.",
    ),
    "HPCFUTURES_DASK_LOG_LEVEL": (
        "``WARNING``",
        "Level of Dask's own loggers (``distributed``, ``tornado``). At ``WARNING`` "
        "hpcfutures also drops Dask's duplicate reports of failed tasks and unpicklable "
        "objects, which reach you as the future's exception anyway; ``INFO`` or ``DEBUG`` "
        "shows everything.",
    ),
    "HPCFUTURES_REQUEUES": (
        "set by a PBS job's resubmission",
        "How many times a PBS job was submitted again by ``requeue=True`` (PBS gives "
        "each resubmission a new job id, and ``max_requeues`` counts on from this).",
    ),
    "HPCFUTURES_STALLED_RUNS": (
        "set by a PBS job's resubmission",
        "How many runs in a row of a resubmitted PBS job recorded no new result (what "
        "``max_requeues`` counts).",
    ),
    "HPCFUTURES_GPUS": (
        "unset: the GPUs the launcher names",
        "The GPUs of a node, such as ``0,1,2,3``, shared out among its worker ranks "
        "(``mpiexec``, ``hpcfutures run`` and the laptop set none themselves); it wins "
        "over ``CUDA_VISIBLE_DEVICES`` and the like, and ``none`` declares none. See "
        ":doc:`resources`.",
    ),
    "HPCFUTURES_FAKE_VERSIONS": (
        "unset",
        "A test seam, for hpcfutures' own tests of the version check: "
        "``python=3.9,cloudpickle=0.1`` makes this process report those versions instead "
        "of its own to the launch's other processes (see :ref:`own-modules`). It changes "
        "nothing else; never set it in a real run.",
    ),
    "HPCFUTURES_RANK": (
        "set by ``hpcfutures run``",
        "This copy's rank, ``0`` to ``HPCFUTURES_SIZE - 1``; its presence selects the "
        "``run`` launcher.",
    ),
    "HPCFUTURES_SIZE": (
        "set by ``hpcfutures run``",
        "How many copies ``hpcfutures run -n N`` started. Set it yourself for a launcher "
        "that does not tell its processes how many it started (the launchers that need "
        "it say so in their error message).",
    ),
    "HPCFUTURES_INSIDE_TASK_ON": (
        "set by every worker",
        "Where this worker runs (``rank 3 (worker) of launch ... on node17``): tasks run "
        "inside a launch there, and so do the processes they start, which inherit it; an "
        "executor created there raises :class:`~hpcfutures.NestedExecutorError`. A process "
        "started by a task that must run a launch of its own can remove it.",
    ),
    "HPCFUTURES_ARRAY_INDICES": (
        "unset",
        "``FIRST-LAST`` or ``FIRST-LAST:STEP``: the index range of a job array, for batch "
        "systems that do not tell an element where its array starts and ends.",
    ),
    "HPCFUTURES_LAUNCH_ID": (
        "set by ``hpcfutures run``",
        "A random id per launch, stamped into the scheduler file so that copies of two "
        "launches never meet.",
    ),
    "HPCFUTURES_RUN_TAGGED": (
        "set by ``hpcfutures run``",
        "``1``: it tags each line of this copy's output with ``[rank N role]``, and the "
        "copy tells it the role it negotiated.",
    ),
    "HPCFUTURES_RUN_TERMINAL": (
        "set by ``hpcfutures run``",
        "``1`` when the output it relays goes to a terminal: a progress bar then draws "
        "in this copy.",
    ),
}

#: Prefixes of the variables hpcfutures' own tests and benchmarks pass to the
#: processes they launch; not the user's, so never reported as unknown.
RESERVED_PREFIXES = ("HPCFUTURES_TEST_", "HPCFUTURES_BENCH_")
PREFIX = "HPCFUTURES_"

_reported: set[str] = set()


def known_variables() -> set[str]:
    """Every ``HPCFUTURES_*`` name hpcfutures reads: the options' and the others."""
    from .options import OPTIONS

    return {option.env_name for option in OPTIONS} | set(OTHER_VARIABLES)


def unknown_variables(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The set ``HPCFUTURES_*`` variables hpcfutures does not know, each with the
    nearest name it does know (``None`` when none is near)."""
    environ = os.environ if environ is None else environ
    known = known_variables()
    return {name: next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.8)), None)
            for name in sorted(environ)
            if name.startswith(PREFIX) and name not in known
            and not name.startswith(RESERVED_PREFIXES)}


def describe_unknown(name: str, nearest: str | None) -> str:
    """One line about an unknown variable: that it is ignored, and what was meant."""
    meant = f"did you mean {nearest}? " if nearest else ""
    return (f"{name} is set but hpcfutures has no such variable, so it is ignored "
            f"({meant}the variables it reads are listed in docs/configuration.rst)")


def warn_unknown_variables(environ: Mapping[str, str] | None = None) -> None:
    """Warn once per process about each unknown ``HPCFUTURES_*`` variable that is set."""
    for name, nearest in unknown_variables(environ).items():
        if name not in _reported:
            _reported.add(name)
            logger.warning("hpcfutures: %s", describe_unknown(name, nearest))
