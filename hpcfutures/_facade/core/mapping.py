"""``Executor.map``: items in order, sent in chunks sized by the batching engine.

Dask pays a fixed cost per task (about a millisecond of scheduler and network
work), so sending each item of a large ``map`` as its own task caps the rate
near a thousand items per second.  A :class:`MapRun` is instead a stream of
the batching engine (:mod:`.batching`), which cuts it into *chunks*: small
ones (``chunksize`` items) while the function's duration is unknown, then
chunks of about a target duration, never more than a fair share of what is
left, and never more in flight than the workers can take, shared with any
other ``map`` and with ``submit``.  Each chunk reports how long its items took
on the worker, which sizes the next ones.

Results are yielded in order as chunks complete; an item's exception is raised
at its position; ``timeout`` and cancellation (closing the iterator, or
``shutdown(cancel_futures=True)``) work as with ``concurrent.futures``: no
chunk is sent after them, and the chunks already out finish, as the calls in
``ProcessPoolExecutor``'s call queue do.  Their results are never yielded, but
their tasks stay the scheduler's until they end, so that a call sent meanwhile goes to
a free worker instead of queueing behind the rest of an abandoned map on a worker
the scheduler would think idle.  Leaving the ``with`` block on an exception
cancels them too (:meth:`MapRun.cancel`).

With ``buffersize`` (Python 3.14's ``Executor.map`` argument) the items are
read from their iterator as the caller consumes results, never more than
``buffersize`` ahead of the last result yielded: a map over an endless
generator runs in bounded memory, and the client holds at most that many
calls and results.  The iterator is read on the consumer's thread (the
user's generator need not be thread-safe), and an exception it raises comes
out of the results iterator after the results before it, as in 3.14.

A map over one ``range``, list or tuple of plain values (no future, no
container) is cut into slices of that sequence (:class:`Rest`) instead of a
list of one-element tuples: a ``range`` of ten million calls costs the client
nothing before its results, and each chunk of it travels as three numbers.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import CancelledError
from typing import Any

from ..._remote.calls import ChunkOutcome, Rows, restore_traceback
from ..._remote.express import Early
from ..._support.loop import loop_thread_only
from .arguments import futures_in, plain_rows
from .batching import Stream
from .futures import TaskFuture
from .pacing import waited
from .progress import MapProgress

__all__ = ["MapRun", "Rest"]


class Rest:
    """The calls of a ``map`` over one sequence not yet cut into chunks: the
    sequence from a position on, each value a call's only argument.

    Chunks are slices of the sequence, so the client holds no per-call object
    (ten million one-element tuples would take 0.6 GB before the first call goes).
    The sequence must not change while the map runs: a ``range`` or tuple, or
    a copy of the caller's list.
    """

    __slots__ = ("_items", "_start")

    def __init__(self, items: Sequence[Any]) -> None:
        self._items = items
        self._start = 0

    def __len__(self) -> int:
        return len(self._items) - self._start

    def __iter__(self) -> Iterator[tuple]:
        """The calls left, as argument tuples."""
        return ((value,) for value in self._items[self._start:])

    def take(self, n: int) -> Sequence[Any]:
        """The next ``n`` values at most (a slice of the sequence), taken off."""
        start = self._start
        chunk = self._items[start:start + n]
        self._start = start + len(chunk)
        return chunk

    def clear(self) -> None:
        self._items, self._start = (), 0


class MapRun(Stream):
    """One ``map`` call: a stream of argument tuples; collects chunk outcomes in order."""

    def __init__(self, bridge: Any, fn: Callable[..., Any], items: list[tuple] | Rest,
                 chunksize: int, *, progress: MapProgress | None = None,
                 record: Callable[[int, list], threading.Event | None] | None = None,
                 positions: Sequence[int] | None = None,
                 source: Iterator[tuple] | None = None, buffersize: int | None = None,
                 fed: bool = False) -> None:
        rest = items if isinstance(items, Rest) else None
        super().__init__(fn, () if rest is not None else items, min_size=chunksize)
        if rest is not None:
            # Of ``pending``, the engine asks only its length, its calls and clear()
            # (take is overridden below): a Rest answers them without a deque.
            self.pending = rest  # type: ignore[assignment]
        #: The sequence the calls are cut from (None: ``pending`` holds argument tuples).
        self._rest = rest
        #: Where more items come from, ``buffersize`` ahead of the consumer at most
        #: (None: ``items`` is the whole map).
        self._source = source
        self._buffersize = buffersize
        #: The source raised this instead of an item: raised after the results before it.
        self._source_error: BaseException | None = None
        #: Each item's position in the user's map, when this run holds only some of
        #: them (the journal had the others); errors name a crashing item by it.
        self._positions = positions
        self._bridge = bridge
        self._batcher = bridge.batcher
        #: Items in the map; while the source is being read, those read so far.
        self._total = len(items)
        #: ``fed``: items come by :meth:`feed` (a journaled map's lookup) until :meth:`end_feed`.
        self._exhausted = source is None and not fed
        #: Whether the engine took this stream in (after that, new items wake the loop).
        self._opened = False
        self._dispatched = 0
        #: Whether items hold this executor's futures (then each chunk is resolved).
        self._depends = not isinstance(items, Rest) and not plain_rows(items) and any(
            isinstance(f, TaskFuture) for f in futures_in(items))
        self._in_flight: dict[Any, int] = {}
        #: Each chunk out -> its items (given back ones go again: :meth:`_given_back`).
        self._chunks: dict[Any, Sequence] = {}
        self._outcomes: dict[int, ChunkOutcome] = {}
        self._cond = threading.Condition()
        self._stopped = False
        #: The executor drained: raised at the first item never sent.
        self._drain_error: BaseException | None = None
        self.finished = threading.Event()
        #: Told how many calls each chunk brought back; both None unless asked for.
        self._progress = progress
        self._tally = getattr(bridge, "tally", None)
        #: ``record(start, values)``: each chunk's results as they arrive (the journal);
        #: it may return an event, set once they are recorded: they are yielded after.
        self._record = record
        self._gates: dict[int, threading.Event] = {}
        #: Results of chunks still running, sent ahead of their end (a chunk held up
        #: by a slow item lets go of those before it: ``_remote/express.py``):
        #: chunk start -> results received and not yet handed to the consumer; how many
        #: it has handed out; and the position each chunk's next result is taken at.
        self._early: dict[int, list] = {}
        self._handed: dict[int, int] = {}
        self._early_at: dict[int, int] = {}

    # -------------------------------------------------------------- feeding
    def start(self) -> MapRun:
        """Hand the items to the engine; the bridge's loop thread sends the chunks."""
        self._read_ahead(0)
        with self._cond:
            self._check_finished()  # an empty map is done at once
        if self.finished.is_set():
            return self
        if self._batcher.open(self):
            self._opened = True
            self._bridge.wake()
        else:  # the executor drained since this map was accepted: nothing is sent
            calls = list(self.pending)
            self.pending.clear()
            self._bridge.refused += len(calls)
            self.drained(calls, self._bridge.drained)
        return self

    def feed(self, items: list[tuple], positions: list[int]) -> None:
        """More items (at ``positions`` of the user's map), from any thread."""
        assert isinstance(self._positions, array)
        depends = not plain_rows(items) and any(
            isinstance(f, TaskFuture) for f in futures_in(items))
        with self._cond:
            if self._stopped:
                if self._drain_error is not None:  # never sent: the requeue counts them
                    self._bridge.refused += len(items)
                return
            self._depends = self._depends or depends
            self._positions.extend(positions)
            self._total += len(items)  # before the engine may send them
            if not self._batcher.extend(self, items):  # drained: its error will come
                self._bridge.refused += len(items)
                return
        if self._opened:
            self._bridge.wake()

    def end_feed(self) -> None:
        """No more items will come (fed, or read from the source)."""
        with self._cond:
            self._exhausted = True
            self._check_finished()
            self._cond.notify_all()

    def take(self, n: int) -> Any:
        if self._rest is None:
            return super().take(n)
        return self._rest.take(n)

    @loop_thread_only
    def dispatch(self, calls: Any) -> None:
        """Send a chunk the engine cut off this map (loop thread)."""
        with self._cond:
            future = None
            if not self._stopped:  # else cancelled since the engine cut it
                future = self._send(calls, self._dispatched)
                self._dispatched += len(calls)
        if future is None:
            self._batcher.done(self)
            return
        self._follow(future)

    def _send(self, calls: Sequence, start: int) -> TaskFuture:
        """Send ``calls``, the map's items from ``start`` on, as one chunk (lock held)."""
        chunk = calls if self._rest is None else Rows(calls, spread=False)
        future = self._bridge.send_chunk(self.fn, chunk, self._depends)
        end = start + len(calls)
        future._call.group_sent(places=range(start, end) if self._positions is None
                                else self._positions[start:end])
        self._in_flight[future] = start
        self._chunks[future] = calls
        return future

    def _follow(self, future: TaskFuture) -> None:
        self._bridge.early_outcomes[future] = lambda early: self._arrived_early(future, early)
        future.add_done_callback(self._chunk_done)

    def _arrived_early(self, future: Any, early: Early) -> None:
        """The results of a running chunk's items ``early.first``, ``early.first + 1``,
        ... (loop thread); those not seen before wait for the consumer (unless a journal
        records the map).  The items its worker gave back, if it did, go again."""
        first, values = early.first, early.outcomes
        with self._cond:
            start = self._in_flight.get(future)
            if start is None:
                return
            seen = self._handed.get(start, 0) + len(self._early.get(start, ()))
            # Not for a journal, which records whole chunks before they are yielded; nor
            # past a gap (never sent so), nor when nothing is new (a chunk sent again).
            if self._record is None and first <= seen < first + len(values):
                self._early.setdefault(start, []).extend(values[seen - first:])
                self._early_at[start + self._handed.get(start, 0)] = start
                self._cond.notify_all()
        if early.rest is not None:
            self._given_back(future, early.rest)

    @loop_thread_only
    def _given_back(self, future: TaskFuture, rest: int) -> None:
        """The worker gave back ``future``'s items from ``rest`` on (an item before them
        ran long: ``_remote/express.py``): they go again as a chunk of their own, for a
        free thread, unless the map sends nothing more; ``future`` keeps the items
        before them (loop thread)."""
        with self._cond:
            calls = self._chunks.get(future)
            start = self._in_flight.get(future)
            if calls is None or start is None or rest >= len(calls):
                return  # came back already, or given back already
            self._chunks[future] = calls[:rest]
            again = self._send_rest(future, start, calls, rest)
        if again is not None:
            self._follow(again)
            self._bridge.wake()

    def _send_rest(self, future: TaskFuture, start: int, calls: Sequence,
                   rest: int) -> TaskFuture | None:
        """Send the items of the chunk at ``start`` from ``rest`` on as a chunk of their
        own (lock held); None if the map sends nothing more (timed out, closed, or
        failed before them: they are never yielded)."""
        future._call.gave_back(rest)  # sent again without them, should its worker die
        if self._stopped:
            return None
        self._batcher.count_out(self)
        return self._send(calls[rest:], start + rest)

    def _chunk_done(self, future: Any) -> None:
        measured: list = []
        busy = idle = again = None
        self._bridge.early_outcomes.pop(future, None)
        with self._cond:
            start = self._in_flight.pop(future, None)
            if start is None:
                return
            handed = self._handed.pop(start, 0)
            self._early.pop(start, None)
            self._early_at.pop(start + handed, None)
            calls = self._chunks.pop(future, ())
            if future.cancelled():
                self._stopped = True
            else:
                outcome = _outcome_of(future)
                if outcome.error is None and len(outcome.values) < len(calls):
                    # Its worker gave items back, and the word of it did not come first.
                    again = self._send_rest(future, start, calls, len(outcome.values))
                self._outcomes[start] = outcome
                if self._record is not None and outcome.values:
                    gate = self._record(start, outcome.values)
                    if gate is not None:
                        self._gates[start] = gate
                if self._progress is not None or self._tally is not None:
                    self._count(outcome)
                if outcome.error is not None:
                    self._stopped = True  # nothing after the error is ever yielded
                elif outcome.values:
                    measured.append((self.fn, outcome.seconds / len(outcome.values)))
                busy = outcome.seconds
                idle = waited(outcome.idle, future._call.sent_at, busy)
                if handed:  # the consumer has the first ones already
                    del self._outcomes[start]
                    self._outcomes[start + handed] = ChunkOutcome(
                        outcome.values[handed:], outcome.error, outcome.seconds, outcome.idle)
            self._batcher.done(self, measured, busy, idle)
            self._check_finished()
            self._cond.notify_all()
        if again is not None:
            self._follow(again)
        self._bridge.wake()  # room for another chunk, of this map or another stream

    def _count(self, outcome: ChunkOutcome) -> None:
        calls = len(outcome.values) + (outcome.error is not None)
        if self._progress is not None:
            self._progress.advance(calls)
        if self._tally is not None:
            self._tally.calls_done(calls, failed=int(outcome.error is not None))

    def _check_finished(self) -> None:
        """Call with the lock held; once nothing more will come back, leave the engine."""
        if self._stopped:
            self._batcher.close(self)
        if not self._in_flight and (self._stopped or (self._exhausted
                                                      and self._dispatched == self._total)):
            self._batcher.close(self)
            self.finished.set()
            if self._progress is not None:
                self._progress.close()

    # ------------------------------------------------------------- stopping
    def stop_sending(self) -> None:
        """Send no more chunks; those on the workers finish (``cancel_futures``)."""
        with self._cond:
            self._stopped = True
            self._check_finished()
            self._cond.notify_all()

    def drained(self, calls: list, error: BaseException) -> None:
        """The executor drained: send nothing more, the chunks out finish, and the first
        item never sent raises ``error`` (the engine handed back ``calls``, unsent)."""
        with self._cond:
            self._drain_error = error
            self._stopped = True
            self._check_finished()
            self._cond.notify_all()

    def cancel(self) -> None:
        """Send nothing more and cancel the chunks not yet finished."""
        with self._cond:
            self._stopped = True
            in_flight = list(self._in_flight)
            self._check_finished()
        for future in in_flight:
            future.cancel()

    # ------------------------------------------------------------- yielding
    def results(self, end_time: float | None) -> Generator[Any, None, None]:
        """Yield every item's result in order; raise an item's error at its position."""
        position = 0
        try:
            while True:
                self._read_ahead(position)
                if position >= self._total:
                    if self._source_error is not None:
                        raise self._source_error
                    if self._exhausted:
                        break
                outcome = self._wait_for(position, end_time)
                values = outcome.values
                self._wait_recorded(position, end_time)
                values.reverse()  # popped as yielded: the caller's copy is the only one
                pop = values.pop
                if self._source is None:  # nothing to read ahead: the tightest loop
                    position += len(values)
                    while values:
                        yield pop()
                while values:
                    yield pop()
                    position += 1
                    self._read_ahead(position)
                if outcome.error is not None:
                    raise restore_traceback(outcome.error)
        finally:
            self.stop_sending()  # the chunks out finish (the module's docstring)

    def _read_ahead(self, yielded: int) -> None:
        """Read items from the source until ``buffersize`` are ahead of ``yielded``
        (on the consumer's thread); then let the engine send them."""
        if (self._exhausted or self._source is None or self._source_error is not None
                or self._stopped):
            return
        assert self._buffersize is not None
        added = 0
        while self._total - yielded < self._buffersize:
            try:
                item = next(self._source)
            except StopIteration:
                self.end_feed()
                break
            except Exception as err:  # raised to the consumer in its place
                self._source_error = err
                self.end_feed()
                break
            with self._cond:
                self._total += 1  # before the engine may send it: never under _dispatched
            self._batcher.add(self, item)
            added += 1
        if added and self._opened:
            self._bridge.wake()

    def _wait_for(self, position: int, end_time: float | None) -> ChunkOutcome:
        with self._cond:
            while position not in self._outcomes:
                start = self._early_at.pop(position, None)
                if start is not None:  # results of a chunk still running
                    values = self._early.pop(start)
                    self._handed[start] = self._handed.get(start, 0) + len(values)
                    return ChunkOutcome(values)
                remaining = None if end_time is None else end_time - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"map result {position} not ready before the timeout")
                if self._stopped and not self._in_flight:
                    if self._drain_error is not None:
                        raise self._drain_error
                    raise CancelledError(f"map was cancelled before result {position} was computed")
                self._cond.wait(remaining)
            return self._outcomes.pop(position)

    def _wait_recorded(self, position: int, end_time: float | None) -> None:
        """Until the journal has pickled the chunk at ``position`` (the caller may
        change a result in place once it has it)."""
        with self._cond:
            gate = self._gates.pop(position, None)
        if gate is not None and not gate.wait(
                None if end_time is None else max(end_time - time.monotonic(), 0.0)):
            raise TimeoutError(f"map result {position} not recorded before the timeout")


def _outcome_of(future: Any) -> ChunkOutcome:
    """A chunk's outcome; a failure of the whole chunk (broken executor, lost
    worker, unpicklable function) becomes an error at the chunk's first item."""
    error = future.exception()
    if error is not None:
        return ChunkOutcome([], error)
    return future.result()
