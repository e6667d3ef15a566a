"""``Executor.map`` with adaptive batching.

Dask pays a fixed cost per task (about a millisecond of scheduler and network
work), so sending each item of a large ``map`` as its own task caps the rate
near a thousand items per second.  A :class:`MapRun` instead sends *chunks*:

* the first chunks are small (``chunksize`` items), and each chunk reports how
  long its items took on the worker;
* later chunks are sized so that one takes about :data:`TARGET_SECONDS`, so
  tiny tasks are batched by the thousand while long ones go one by one;
* no chunk takes more than a fair share of what is left, and at most two
  chunks per worker thread are in flight, so batching never costs load balance
  at the end of the run; but a chunk is not split below a few milliseconds of
  work, where another round trip would cost more than it balances.

Results are yielded in order as chunks complete; an item's exception is raised
at its position; ``timeout`` and cancellation (closing the iterator, or
``shutdown(cancel_futures=True)``) work as with ``concurrent.futures``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any

from .._remote.calls import ChunkOutcome, restore_traceback, run_chunk_task
from .progress import MapProgress

__all__ = ["MapRun"]

#: Seconds of work one Dask task should carry once item durations are known.
TARGET_SECONDS = 0.05
#: Chunks in flight per worker thread: one running, one queued behind it.
IN_FLIGHT_PER_THREAD = 2
#: How much bigger than the previous chunk the next may be while learning.
GROWTH = 16
#: Seconds of work below which a chunk is not split for load balance: a
#: Dask task's round trip costs a few milliseconds, so halving a chunk that
#: short only adds round trips at the end of the run.
MIN_SPLIT_SECONDS = 0.005


class MapRun:
    """One ``map`` call: feeds chunks to the bridge, collects outcomes in order."""

    def __init__(self, bridge: Any, fn: Callable[..., Any], items: list[tuple],
                 chunksize: int, threads: Callable[[], int], *,
                 progress: MapProgress | None = None) -> None:
        self._bridge = bridge
        self._fn = fn
        self._pending = collections.deque(items)
        self._total = len(items)
        self._dispatched = 0
        self._min_chunk = chunksize
        self._next_size = chunksize
        self._threads = threads
        self._durations = bridge.durations
        self._in_flight: dict[Any, int] = {}
        self._outcomes: dict[int, ChunkOutcome] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self.finished = threading.Event()
        #: Told how many calls each chunk brought back; both None unless asked for.
        self._progress = progress
        self._tally = getattr(bridge, "tally", None)

    # -------------------------------------------------------------- feeding
    def start(self) -> MapRun:
        with self._cond:
            self._feed()
        return self

    def _feed(self) -> None:
        """Send chunks until the in-flight budget is used (call with the lock held)."""
        if self._stopped:
            # Cancelling runs this in the user's thread with the lock held; asking
            # for the thread count would then wait for the loop, whose callbacks
            # wait for the lock: a deadlock on scancel mid-map.
            self._check_finished()
            return
        budget = IN_FLIGHT_PER_THREAD * max(1, self._threads())
        while not self._stopped and self._pending and len(self._in_flight) < budget:
            size = self._chunk_size(budget)
            chunk = [self._pending.popleft() for _ in range(min(size, len(self._pending)))]
            start = self._dispatched
            self._dispatched += len(chunk)
            try:
                future = self._bridge.submit(self._fn, (chunk,), {}, runner=run_chunk_task)
            except Exception as err:  # e.g. the executor broke meanwhile
                self._outcomes[start] = ChunkOutcome([], err)
                self._stopped = True
                break
            self._in_flight[future] = start
            future.add_done_callback(self._chunk_done)
        self._check_finished()

    def _chunk_size(self, budget: int) -> int:
        fair_share = max(1, len(self._pending) // budget)
        estimate = self._durations.get(self._fn)
        if estimate is None:
            wanted = self._next_size
        else:
            estimate = max(estimate, 1e-7)
            wanted = int(TARGET_SECONDS / estimate)
            wanted = min(wanted, self._next_size * GROWTH)  # grow in steps, shrink at once
            # Near the end, share what is left, but not in slivers of work
            # shorter than a round trip.
            fair_share = max(fair_share, int(MIN_SPLIT_SECONDS / estimate))
        size = max(self._min_chunk, min(wanted, fair_share))
        self._next_size = max(size, 1)
        return size

    def _chunk_done(self, future: Any) -> None:
        with self._cond:
            start = self._in_flight.pop(future, None)
            if start is None:
                return
            if future.cancelled():
                self._stopped = True
            else:
                outcome = _outcome_of(future)
                self._outcomes[start] = outcome
                if self._progress is not None or self._tally is not None:
                    self._count(outcome)
                if outcome.error is not None:
                    self._stopped = True  # nothing after the error is ever yielded
                else:
                    self._learn(outcome)
            self._feed()
            self._cond.notify_all()

    def _learn(self, outcome: ChunkOutcome) -> None:
        if outcome.values:
            self._durations.record(self._fn, outcome.seconds / len(outcome.values))

    def _count(self, outcome: ChunkOutcome) -> None:
        calls = len(outcome.values) + (outcome.error is not None)
        if self._progress is not None:
            self._progress.advance(calls)
        if self._tally is not None:
            self._tally.calls_done(calls, failed=int(outcome.error is not None))

    def _check_finished(self) -> None:
        if not self._in_flight and (self._stopped or not self._pending):
            self.finished.set()
            if self._progress is not None:
                self._progress.close()

    # ------------------------------------------------------------- stopping
    def cancel(self) -> None:
        """Send nothing more and cancel the chunks not yet finished."""
        with self._cond:
            self._stopped = True
            in_flight = list(self._in_flight)
            self._check_finished()
        for future in in_flight:
            future.cancel()

    # ------------------------------------------------------------- yielding
    def results(self, end_time: float | None) -> Iterator[Any]:
        """Yield every item's result in order; raise an item's error at its position."""
        position = 0
        try:
            while position < self._total:
                outcome = self._wait_for(position, end_time)
                values = outcome.values
                values.reverse()
                position += len(values)
                while values:
                    yield values.pop()
                if outcome.error is not None:
                    raise restore_traceback(outcome.error)
        finally:
            self.cancel()

    def _wait_for(self, position: int, end_time: float | None) -> ChunkOutcome:
        with self._cond:
            while position not in self._outcomes:
                remaining = None if end_time is None else end_time - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"map result {position} not ready before the timeout")
                if self._stopped and not self._in_flight:
                    raise CancelledError(f"map was cancelled before result {position} was computed")
                self._cond.wait(remaining)
            return self._outcomes.pop(position)


def _outcome_of(future: Any) -> ChunkOutcome:
    """A chunk's outcome; a failure of the whole chunk (broken executor, lost
    worker, unpicklable function) becomes an error at the chunk's first item."""
    error = future.exception()
    if error is not None:
        return ChunkOutcome([], error)
    return future.result()
