"""The one way the tests (and their job scripts) poll: ``wait_until``.

Standard library only, so a job script started by ``srun``, ``mpiexec`` or
``qsub`` can import it without pytest.  Prefer a real event (a line read from
a child, ``Popen.wait``, Dask's own waits); poll only where nothing tells.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pace import scaled

__all__ = ["wait_until", "workers_joined"]

T = TypeVar("T")


def wait_until(observe: Callable[[], T], timeout: float, what: str, *,
               done: Callable[[T], object] = bool, first: float = 0.05, cap: float = 0.5,
               details: Callable[[], str] | None = None) -> T:
    """Call ``observe`` until ``done(value)`` holds; return that value.

    Between calls it sleeps ``first`` seconds, doubling up to ``cap`` (capped
    back-off), and never past the deadline: the last call is made when
    ``timeout`` seconds have passed.  Then it raises an ``AssertionError``
    naming ``what`` was awaited, the last value observed and, if given,
    ``details()`` (a job's output, say).  ``timeout`` is stretched by the run's
    slowdown factor (:mod:`pace`).
    """
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    delay = first
    while True:
        value = observe()
        if done(value):
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            seen = "" if isinstance(value, bool) else f"; last seen: {value!r}"
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(f"waited {timeout:g} s for {what}, in vain{seen}{extra}")
        time.sleep(min(delay, left))
        delay = min(delay * 2, cap)


def workers_joined(ex, count: int, timeout: float = 60) -> dict:
    """Wait until ``count`` workers have joined the executor ``ex``; return them.

    An executor is handed back once one worker has joined, and on a loaded
    machine the others can join seconds later: a check that needs every worker
    (calls spread over all of them, a summary naming each) waits for them first.
    """
    return wait_until(ex.worker_memory_limits, timeout, f"{count} workers to join",
                      done=lambda joined: len(joined) >= count)

