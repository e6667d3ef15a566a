"""A worker's memory limit, enforced by the kernel so the task that crosses it fails alone.

Dask's own answer to a task that eats too much memory is a nanny that kills
and restarts the worker process.  That costs every rank a second process (and
a second import of ``distributed``) at start-up, reacts only on its next poll
(a single large allocation reaches the batch system's OOM killer first, which
takes the whole rank), and retries the task on other workers until each of
them has been killed in turn.

Here the limit is the worker process's data-segment limit (``RLIMIT_DATA``,
which on Linux counts heap and private anonymous mappings, i.e. what NumPy
and Python allocate).  An allocation that would cross it raises
``MemoryError`` in the task that asked for it, at once; the worker and the
other tasks carry on.  :func:`explain` turns that ``MemoryError`` into a
:class:`~hpcfutures.TaskMemoryError` naming the limit and where it came from.
Dask keeps doing what it does below the limit (spilling, pausing).
"""

from __future__ import annotations

import logging
import resource

from .._errors import TaskMemoryError

__all__ = ["enforce", "explain", "limit_in_force", "size"]

logger = logging.getLogger("hpcfutures")

#: Bytes the limit must leave above what the worker already uses, or enforcing
#: it would only break the worker's own machinery.
HEADROOM = 64 * 2**20

_limit: int | None = None


def _data_in_use() -> int:
    """The process's data segment now (``VmData``), in bytes; 0 if unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def enforce(limit: int | None) -> int | None:
    """Make ``limit`` bytes this process's data limit; the limit in force, or None.

    A limit the process already exceeds is not enforced (with a warning that
    says so): every later allocation would fail, Dask's included.
    """
    global _limit
    if not limit:
        return None
    in_use = _data_in_use()
    if in_use and limit < in_use + HEADROOM:
        logger.warning(
            "memory_limit=%s is below what this worker already uses (%s); not enforcing "
            "it. Give each worker more memory (memory_limit=, HPCFUTURES_MEMORY_LIMIT or "
            "the job's memory request)", size(limit), size(in_use))
        return None
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ValueError, OSError) as err:
        logger.warning("could not enforce memory_limit=%s: %s", size(limit), err)
        return None
    _limit = limit
    return limit


def limit_in_force() -> int | None:
    """The limit :func:`enforce` set in this process, if any."""
    return _limit


def explain(exc: BaseException) -> BaseException:
    """A task's ``MemoryError`` as a :class:`TaskMemoryError` naming the limit."""
    if _limit is None or not isinstance(exc, MemoryError) or isinstance(exc, TaskMemoryError):
        return exc
    detail = f" ({type(exc).__name__}: {exc})" if str(exc) else ""
    return TaskMemoryError(
        f"the task ran out of memory: it would have taken its worker past the worker's "
        f"memory limit of {size(_limit)}{detail}. Each worker gets memory_limit= "
        "(HPCFUTURES_MEMORY_LIMIT), or its share of the job's memory request; ask for "
        "more memory per worker (fewer workers per node, a larger --mem), fewer threads "
        "per worker, or make the task smaller. The worker is fine and keeps running tasks."
    )


def size(n: int) -> str:
    """``n`` bytes for people: ``700.0 MiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
