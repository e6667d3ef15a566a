"""How a ``map`` of MPI tasks cuts its calls into groups, each run on one reservation.

A queue holds the calls not yet given to a group, in order; each lane (one
coroutine of :mod:`.mpicalls`, one group of ranks at a time) takes the next
group from it once the scheduler granted its ranks.  Groups grow with the
measured pace of the calls, so that a group's fixed cost (reservation,
member tasks, fetch) is paid rarely for small calls, while long calls still
spread over every lane.
"""

from __future__ import annotations

import collections
import statistics
from typing import Any

from ..core.futures import TaskFuture
from .mpitask import MPITask

__all__ = ["CallQueue", "lanes", "start"]

#: Seconds of calls one group should carry once their duration is known: a group's
#: fixed cost (reservation, member tasks, fetch) is some 20 ms, a few ms on a quiet node.
GROUP_SECONDS = 0.25
#: Most calls in one group (each member's task carries every call's arguments).
MOST_CALLS_PER_GROUP = 1024
#: How much bigger than the largest group so far the next may be (its pace was
#: measured on fewer calls).
GROWTH = 16


def lanes(items: int, ranks: int, workers: int) -> int:
    """Groups of a ``map`` of ``ranks``-rank calls that may run at once: as many as the
    launch's worker ranks hold, no more than there are items."""
    return max(1, min(items, workers // ranks))


class CallQueue:
    """The calls of one ``submit`` or ``map`` not yet given to a group, in order.

    Each lane (one coroutine, one group of ranks at a time) takes the next
    calls once its ranks are granted: the first group ``least`` calls (the
    map's ``chunksize``), the next ones as many as fill GROUP_SECONDS at the
    last group's pace (its median call) and at most GROWTH times the largest
    group so far, but no more than an even share per lane of what is left,
    and no fewer than ``least``.
    """

    def __init__(self, task: MPITask, pending: list[tuple[TaskFuture, tuple[tuple, dict]]],
                 least: int, lanes: int) -> None:
        self.task = task
        self.pending = collections.deque(pending)
        self.least = least
        self.lanes = lanes
        #: Seconds one call took on member 0, in the last group that ended (None: unknown).
        self.per_call: float | None = None
        #: The groups asking for ranks for these calls.
        self.asking: set[str] = set()
        #: The largest group taken so far.
        self.last = 1

    def left(self) -> bool:
        """Whether a call waits that is neither cancelled nor done."""
        while self.pending and self.pending[0][0].done():
            self.pending.popleft()
        return bool(self.pending)

    def size(self) -> int:
        """How many calls the next group takes."""
        share = -(-len(self.pending) // self.lanes)
        by_time = (self.least if self.per_call is None
                   else int(GROUP_SECONDS / max(self.per_call, 1e-6)))
        return max(1, self.least, min(share, MOST_CALLS_PER_GROUP, GROWTH * self.last, by_time))

    def take(self) -> list[tuple[TaskFuture, tuple[tuple, dict]]]:
        """The next group's calls, each marked RUNNING (cancelled ones left out)."""
        size = self.size()
        taken: list[tuple[TaskFuture, tuple[tuple, dict]]] = []
        while self.pending and len(taken) < size:
            future, call = self.pending.popleft()
            if start(future):
                taken.append((future, call))
        self.last = max(self.last, len(taken))
        return taken

    def measured(self, outcome: Any) -> None:
        """Learn the pace from member 0's outcome (a BundleOutcome): its median call."""
        seconds = getattr(outcome, "seconds", None)
        if seconds:
            self.per_call = statistics.median(seconds)


def start(future: TaskFuture) -> bool:
    """Mark the call RUNNING; False if it was cancelled (or settled) meanwhile."""
    if future.done() and not future.cancelled():  # failed by a broken executor
        return False
    try:
        return future.set_running_or_notify_cancel()
    except RuntimeError:
        return False
