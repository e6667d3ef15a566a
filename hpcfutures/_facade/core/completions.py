"""Completing futures as their Dask tasks end, without a round trip per task.

The scheduler streams each task's end to the client; a finished task's result
is then fetched together with every other result ready at that moment (one
``gather`` for the lot).  While a gather is under way the results that finish
wait for it and go out together in the next; only when the gather under way
has taken :data:`SLOW_GATHER` s (a slow worker, or one that just left) does
another start beside it, up to :data:`GATHERS` at once, so that a slow worker
holds back only its own batch.  A worker that leaves disturbs only the batches
that held one of its results.  If a
batch cannot be fetched whole, its results are fetched one by one, so that one
unpicklable result fails only its own future.  Loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pickle
from collections.abc import Callable
from typing import Any

from ..._errors import RemoteTraceback, SerializationError
from ..._remote.calls import restore_traceback
from ..._remote.express import Early
from ..._support.loop import loop_thread_only
from .engine import Engine
from .futures import TaskFuture, settle

__all__ = ["GATHERS", "SLOW_GATHER", "Completions", "as_serialization_error"]

#: Batches of results fetched at once.  Dask's client runs at most five gathers
#: at a time (its gather semaphore) and folds a gather that waits for its turn
#: into the one waiting before it; four keep a slot free for the batch asked again
#: after a worker left while the abandoned one still ends on its own.
GATHERS = 4
#: Seconds the youngest gather under way may take before another starts beside
#: it.  Gathers side by side from the start cost a large launch throughput
#: (more, smaller gathers: each one a scheduler question and connections to
#: many workers; benchmarks/scale.py shows it at 1,000 workers).
SLOW_GATHER = 0.5

_Batch = list[tuple[Any, TaskFuture]]


class Completions:
    """Settles :class:`TaskFuture` objects from their Dask futures.

    Args:
        client: The Dask client.
        engine: The engine (the bridge) it is part of: its ``recovery`` takes over a
            task lost with its worker (``recovery.lost``); it hears of a task that
            ended neither finished nor erred while its future still waits
            (``connection_lost``: the scheduler is gone), and runs coroutines on the
            loop (``in_background``).
    """

    def __init__(self, client: Any, engine: Engine) -> None:
        self._client = client
        self._engine = engine
        self._ready: _Batch = []
        #: The batches being fetched, each with the future that abandons it and
        #: when its gather started (loop time).
        self._fetching: dict[int, tuple[_Batch, asyncio.Future[None], float]] = {}
        self._batches = 0
        #: Starts another gather once the youngest under way has been slow.
        self._timer: asyncio.TimerHandle | None = None
        #: Dask key -> the future its small result settles, should it come ahead
        #: of the task's end (``_remote/express.py``).
        self._awaiting: dict[Any, TaskFuture] = {}
        #: Keys settled by a small result whose end Dask has not told yet, and the
        #: event :meth:`ends_heard` waits on for there to be none.
        self._ahead: set[Any] = set()
        self._none_ahead: asyncio.Event | None = None
        #: A group's future (a map chunk's, a bundle's) -> ``take(early)``: the outcomes
        #: of its first calls, sent ahead of its end while it runs, and the calls its
        #: worker gave back (``_remote/express.py``); its stream sets and drops its own.
        self.early_outcomes: dict[TaskFuture, Callable[[Early], None]] = {}

    @property
    def fetching(self) -> int:
        """Batches being fetched now (at most :data:`GATHERS`)."""
        return len(self._fetching)

    def worker_left(self) -> None:
        """A worker left: stop waiting for the batches that held one of its results.

        Dask told the client of each result that was only on that worker
        (``lost-data``, sent before the scheduler's plug-ins hear of the
        departure, so before this) and computes it again; a gather already
        under way would keep trying the dead worker's address (Dask's connect
        retries a refused connection for its whole timeout, and then asks
        again), and every other result of its batch would wait behind it.
        Such a batch is asked again: its results still held elsewhere in a new
        gather, its lost ones once computed again.  Batches without a lost
        result go on undisturbed, so a wave of departures (an idle release)
        costs nothing.

        The old gather is left to end on its own, never cancelled: Dask's client
        lets gathers that arrive while one waits for its turn join that one, and
        a gather cancelled before its turn came leaves the client's shared slot
        holding a cancelled task, which every later gather then joins and fails
        with (distributed 2025.9 to 2026.8 at least): every result after a
        worker's death would never be delivered.
        """
        for batch, abandon, _ in list(self._fetching.values()):
            if not abandon.done() and any(d.status != "finished" for d, _ in batch):
                abandon.set_result(None)

    @loop_thread_only
    def follow(self, dask_future: Any, future: TaskFuture) -> None:
        """Settle ``future`` when ``dask_future`` ends."""
        self._awaiting[dask_future.key] = future
        self._engine.in_background(self._watch(dask_future, future))

    @loop_thread_only
    def arrived(self, key: Any, payload: bytes) -> None:
        """A task's small result, sent ahead of its end: no fetch needed.

        One that cannot be unpickled here is left to the fetch, which reports
        it as it would any result.
        """
        future = self._awaiting.get(key)
        if future is None or future.done():
            return
        try:
            value = pickle.loads(payload)
        except Exception:
            return
        if isinstance(value, Early):
            take = self.early_outcomes.get(future)
            if take is not None:
                take(value)
            return
        self._ahead.add(key)
        settle(future, result=value)

    async def ends_heard(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s) until Dask has told the end of every task whose
        result came ahead of it: until then the scheduler still counts it running
        (the end-of-run summary asks the scheduler what ran)."""
        if not self._ahead:
            return
        self._none_ahead = asyncio.Event()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._none_ahead.wait(), timeout)

    async def _watch(self, dask_future: Any, future: TaskFuture) -> None:
        try:
            await self._until_settled(dask_future, future)
        finally:
            if self._awaiting.get(dask_future.key) is future:
                del self._awaiting[dask_future.key]
            self._ahead.discard(dask_future.key)
            if not self._ahead and self._none_ahead is not None:
                self._none_ahead.set()

    async def _until_settled(self, dask_future: Any, future: TaskFuture) -> None:
        exception = await dask_future.exception()
        status = dask_future.status
        while status == "lost":
            # Finished, then its result was lost with its worker before this
            # coroutine ran (a wave of deaths): Dask computes it again, as the
            # client still holds it.  Not a lost scheduler.
            exception = await dask_future.exception()
            status = dask_future.status
        if status == "finished":
            if future.done():  # its result came ahead of its end
                return
            self._ready.append((dask_future, future))
            self._fetch_more()
        elif status == "error":
            if self._engine.recovery.lost(dask_future, future, exception):
                return
            settle(future, exception=as_serialization_error(restore_traceback(exception)))
        elif not future.done():
            self._engine.connection_lost()

    def _fetch_more(self) -> None:
        """Start fetching what is ready: at once when no gather is under way, else
        once the youngest one has taken :data:`SLOW_GATHER` s (fewer than
        :data:`GATHERS` under way)."""
        if not self._ready or len(self._fetching) >= GATHERS:
            return
        loop = asyncio.get_running_loop()
        if self._fetching:
            wait = max(started for *_, started in self._fetching.values()) + SLOW_GATHER
            wait -= loop.time()
            if wait > 0:
                if self._timer is None:
                    self._timer = loop.call_later(wait, self._slow_gather)
                return
        batch, self._ready = self._ready, []
        batch = [(d, f) for d, f in batch if not f.done()]
        if batch:
            self._batches += 1
            abandon = loop.create_future()
            self._fetching[self._batches] = (batch, abandon, loop.time())
            self._engine.in_background(self._fetch(self._batches, batch, abandon))

    def _slow_gather(self) -> None:
        self._timer = None
        self._fetch_more()

    async def _fetch(self, number: int, batch: _Batch, abandon: asyncio.Future[None]) -> None:
        """Fetch one batch of finished results: one round trip for many tasks."""
        try:
            fetch = self._engine.in_background(self._client.gather([d for d, _ in batch]))
            # Not cancelled with this task (the loop stopping): see worker_left.
            await asyncio.wait({fetch, abandon}, return_when=asyncio.FIRST_COMPLETED)
            if not fetch.done():  # it held a lost result: ask again (see worker_left)
                fetch.add_done_callback(functools.partial(_late, batch))
                self._ask_again(batch)
                return
            try:
                values = fetch.result()
            except (Exception, asyncio.CancelledError):
                values = None
            if values is None:
                await self._gather_one_by_one(batch)
                return
            for (_, future), value in zip(batch, values, strict=False):
                settle(future, result=value)
        finally:
            del self._fetching[number]
            self._fetch_more()

    def _ask_again(self, batch: _Batch) -> None:
        """An abandoned batch: what is still finished is fetched anew, the rest
        once Dask has computed it again."""
        for dask_future, future in batch:
            if future.done():
                continue
            if dask_future.status == "finished":
                self._ready.append((dask_future, future))
            else:
                self.follow(dask_future, future)

    async def _gather_one_by_one(self, batch: _Batch) -> None:
        for dask_future, future in batch:
            try:
                value = await self._client.gather(dask_future)
            except Exception as err:
                # A finished result whose worker died before it was fetched: Dask
                # computes it again, and may find it lost once more (its worker
                # died in the same wave): recovery decides, as for any lost task.
                if self._engine.recovery.lost(dask_future, future, err):
                    continue
                settle(future, exception=as_serialization_error(restore_traceback(err)))
            else:
                settle(future, result=value)


def _late(batch: _Batch, fetch: asyncio.Future) -> None:
    """An abandoned gather ended: its results settle what is still waiting (the
    gather asked again settles the rest); its error, if any, is dropped."""
    if fetch.cancelled() or fetch.exception() is not None:
        return
    for (_, future), value in zip(batch, fetch.result(), strict=False):
        if not future.done():
            settle(future, result=value)


def as_serialization_error(exc: BaseException) -> BaseException:
    """Dask's own failure to pickle a task or its result, as a :class:`SerializationError`.

    A call's own exceptions carry their remote traceback and are left alone;
    a ``TypeError`` without one was raised by Dask while (de)serializing.
    """
    if (type(exc) is not TypeError or isinstance(exc.__cause__, RemoteTraceback)
            or "serializ" not in str(exc).lower()):
        return exc
    wrapped = SerializationError(
        f"{exc}. A call's function, arguments and result must be picklable with cloudpickle "
        "(no open files, locks, sockets or generators)")
    wrapped.__cause__ = exc
    return wrapped
