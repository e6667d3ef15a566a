"""The versions a launch's processes must share, and the one error when they differ.

A function travels by value (cloudpickle: its bytecode) and results come back
the same way, so the client, the scheduler and every worker must run the same
Python minor version and the same hpcfutures, distributed and cloudpickle.
Otherwise the failure comes late and obscurely: a worker that cannot load a
call's function in the middle of a map, or a lost worker.

Each process works its versions out once.  The scheduler publishes its own
with its address (:class:`~hpcfutures.SchedulerInfo`: the scheduler file or
the MPI broadcast), so the client and each worker compare them with their own
before connecting, at no cost to the launch: a client raises
:class:`~hpcfutures.VersionMismatchError` before its first call, and a worker
that differs does not join (it reports why, as any worker that fails to start).

Test seam: ``HPCFUTURES_FAKE_VERSIONS="python=3.9,cloudpickle=0.1"`` makes
this process report those versions instead of its own (read at each call, so
a test script can set it for some ranks only).  It exists for the tests of
this check; it changes nothing else.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping

from .._errors import VersionMismatchError

__all__ = ["FAKE_VERSIONS_VARIABLE", "MISMATCH_MARK", "check", "import_path", "mismatch",
           "versions"]

#: The test seam (see the module's docstring).
FAKE_VERSIONS_VARIABLE = "HPCFUTURES_FAKE_VERSIONS"
#: What the checked names are called in messages, in order.
CHECKED = {"python": "Python", "hpcfutures": "hpcfutures", "distributed": "distributed",
           "cloudpickle": "cloudpickle"}
#: Opens every mismatch message (a worker's report of one is recognised by it).
MISMATCH_MARK = "versions differ:"


@functools.lru_cache(maxsize=1)
def _own_versions() -> tuple[tuple[str, str], ...]:
    from importlib import metadata

    import cloudpickle
    import distributed

    try:  # as hpcfutures.__version__ says it
        ours = metadata.version("hpcfutures")
    except metadata.PackageNotFoundError:  # pragma: no cover - a checkout never installed
        ours = "0+unknown"
    return (("python", f"{sys.version_info[0]}.{sys.version_info[1]}"),
            ("hpcfutures", ours),
            ("distributed", str(distributed.__version__)),
            ("cloudpickle", str(cloudpickle.__version__)))


def versions() -> dict[str, str]:
    """This process's Python minor version and hpcfutures, distributed and cloudpickle
    versions (the test seam's, where it is set)."""
    mine = dict(_own_versions())
    for part in os.environ.get(FAKE_VERSIONS_VARIABLE, "").replace(";", ",").split(","):
        name, _, value = part.partition("=")
        if name.strip() in CHECKED and value.strip():
            mine[name.strip()] = value.strip()
    return mine


def _describe(values: Mapping[str, str]) -> str:
    return ", ".join(f"{CHECKED[name]} {values.get(name) or '(not reported)'}"
                     for name in CHECKED)


def mismatch(here: str, theirs: Mapping[str, str] | None, there: str,
             mine: Mapping[str, str] | None = None) -> str | None:
    """Why ``there`` (whose versions are ``theirs``) cannot work with ``here``
    (this process, or ``mine``); None when the checked versions agree.

    An empty ``theirs`` comes from an hpcfutures older than this check, which
    did not report its versions: that differs too.
    """
    mine = versions() if mine is None else mine
    theirs = dict(theirs or {})
    differing = [name for name in CHECKED if str(theirs.get(name, "")) != mine[name]]
    if not differing:
        return None
    if not theirs:
        what = (f"{there} runs an hpcfutures older than this one's version check (it did "
                "not report its versions)")
    else:
        what = f"{there} runs {_describe(theirs)}"
    return (f"{MISMATCH_MARK} {what}; {here} runs {_describe(mine)}. Functions travel as "
            "Python bytecode and the processes share hpcfutures', Dask's and cloudpickle's "
            "messages, so all of them must run the same Python minor version and the same "
            "versions of these three packages: install the same versions on both sides (or "
            "point the launch at the same environment, e.g. allocate(python=...))")


def check(here: str, theirs: Mapping[str, str] | None, there: str) -> None:
    """Raise :class:`~hpcfutures.VersionMismatchError` when :func:`mismatch` finds one."""
    problem = mismatch(here, theirs, there)
    if problem:
        raise VersionMismatchError(problem)


def import_path() -> list[str]:
    """The folders this process imports from (``sys.path``), as absolute paths."""
    return [os.path.abspath(entry or os.curdir) for entry in sys.path if isinstance(entry, str)]
