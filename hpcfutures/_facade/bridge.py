"""The hub between ``concurrent.futures`` futures and Dask: the executor's task state.

Data flow (client process)::

    user thread                        loop thread (one asyncio loop)
    ───────────                        ──────────────────────────────
    submit() ─┬ plain call: held ───> _flush(): the batching engine cuts groups
              │   (SubmitStream)         (batching.py) off every stream: bundles
              │                          (bundles.py), map chunks
    map() ────┼ items: a stream          (mapping.py)
              │   (MapRun)            │
              └ call with futures ──> │ then sends the queue: one graph per
                  among its args:     │  batch (sending.py), futures swapped
                  queued              │  for Dask futures (arguments.py)
                                      completions.py: ends streamed by the
                                      │  scheduler, small results with them,
                                      │  larger ones fetched in batches
    TaskFuture.result() <── settle ───┘

The bridge is the engine: it owns the parts that move calls (``batcher``, ``submits``,
``sender``, ``completions``, ``recovery``, ``mpi_calls``), each built with the engine
itself and reaching the others through it (``engine.sender.resend``,
``engine.break_executor``...), never through callbacks wired here (what each asks of the
engine: ``core/engine.py``, which mypy holds this class to); and it keeps what they
share: the futures still outstanding, whether the executor is broken, and the cluster as
the client sees it. Dask tells the client how many workers and threads there are as they
join and leave (``cluster_changed``); the batching engine sizes its groups by the
threads. The watchdog (``watch_workers``) breaks the executor when calls wait and no
worker is left, at once when the scheduler says none can come, else after the launch's
timeout, so that work submitted after the last worker died does not wait forever.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._errors import BrokenHPCExecutor, TimeLimitError
from .._remote.calls import Rows, run_chunk_task, run_task
from .._support.loop import LoopThread, loop_thread_only
from .._support.patience import Patience
from .core.arguments import futures_in
from .core.batching import Batcher, small_launch
from .core.bundles import SubmitStream
from .core.capacity import WorkerMemory, ask_worker_memory
from .core.completions import Completions
from .core.futures import TaskFuture, settle
from .core.recovery import Recovery
from .core.roster import WorkerRoster
from .core.sending import Sender
from .mpi.mpicalls import MPICalls
from .mpi.mpitask import MPITask

__all__ = ["TaskBridge", "TaskFuture"]

logger = logging.getLogger("hpcfutures")


class TaskBridge:
    """Submits tasks to Dask from any thread and keeps track of their futures."""

    def __init__(self, loop: LoopThread, client: Any, address: str, threads: int = 1) -> None:
        self._loop = loop
        self._client = client
        self._address = address
        self._lock = threading.Lock()
        self._queue: collections.deque = collections.deque()
        self._flush_scheduled = False
        self._outstanding: set[TaskFuture] = set()
        self._broken: BrokenHPCExecutor | None = None
        #: Set once the executor drained before the allocation's end (draining.py).
        self._drained: TimeLimitError | None = None
        #: Calls refused by the drain: never started, or submitted after it.
        self.refused = 0
        #: What the journal holds, for the drain's message (the journal sets it).
        self.journal_note: Callable[[], str | None] = lambda: None
        #: Results the journal recorded in this run (None: no journal), for the requeue.
        self.journal_added: Callable[[], int | None] = lambda: None
        self._closing = False
        self._total_threads = max(1, threads)
        self._workers = 1  # at least the one the client waited for
        #: Set when SIGTERM stops the launch: its breaking is then expected.
        self.stopped_by_signal = False
        #: Coroutines running on the loop for the engine, kept so the loop does not drop them.
        self._background: set[asyncio.Future] = set()
        # The engine's parts: each reaches the others, and what they share here,
        # through this object (its ``engine``), on the loop thread.
        #: Sizes every group of calls (map chunks, submit bundles) for all streams.
        self.batcher = Batcher(self.worker_threads)
        #: Settles futures as their tasks end; small results ride ahead (completions.py).
        self.completions = Completions(client, self)
        #: Names tasks, swaps dependencies for Dask futures and sends them (sending.py).
        self.sender = Sender(client, self)
        #: Decides what becomes of the calls of a task lost with its worker (recovery.py).
        self.recovery = Recovery(client, self)
        #: The plain submits, held and bundled (bundles.py).
        self.submits = SubmitStream(self)
        #: MPI tasks, with ranks reserved for each group (mpicalls.py).
        self.mpi_calls = MPICalls(client, self)
        self.batcher.open(self.submits)
        self.key_prefix = self.sender.key_prefix
        self.result_arrived = self.completions.arrived
        self.ends_heard = self.completions.ends_heard
        #: A group's first outcomes, ahead of its end (its stream sets and drops its own).
        self.early_outcomes = self.completions.early_outcomes
        # Every call still outstanding fails as soon as the scheduler's stream drops,
        # not only those Dask then cancels: a call held here, or sent while Dask tries
        # to reconnect, would otherwise wait for that whole timeout.
        from .. import _dask  # the client is connected: distributed is imported already

        _dask.on_scheduler_lost(client, self.connection_lost)
        self._tally: Any = None
        #: How errors name the scheduler's rank and a worker's (set by the client side).
        self.scheduler_pointer = "the scheduler's process probably died; see its output"
        #: The cause given to the error when the scheduler is lost (allocate: the job ended).
        self.scheduler_lost_cause: BaseException | None = None
        #: What outstanding futures fail with when the scheduler is lost (an
        #: allocated executor's says that its job stopped serving).
        self.broken_type: type[BrokenHPCExecutor] = BrokenHPCExecutor
        #: Names the workers that leave early (its ``pointer`` is set by the client side).
        self.roster = WorkerRoster()

    @property
    def patience(self) -> Patience:
        """The launch's waits, from its size (set by the client side)."""
        return self.recovery.patience

    @patience.setter
    def patience(self, patience: Patience) -> None:
        self.recovery.patience = patience

    @property
    def tally(self) -> Any:
        """Counts the calls that came back, for the end-of-run summary (None: off)."""
        return self._tally

    @tally.setter
    def tally(self, tally: Any) -> None:
        self._tally = tally
        self.sender.count_calls = tally is not None

    # ------------------------------------------------------------ user thread
    def submit(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> TaskFuture:
        """One call: held for bundling, or queued at once if it depends on other tasks."""
        future = TaskFuture()
        depends = bool(futures_in(args, kwargs))
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if self._drained is not None:
                self.refused += 1
                raise self._drained
            self._outstanding.add(future)
            if depends:
                self._queue.append((future, run_task, fn, args, kwargs, True))
            else:
                self.submits.hold(future, fn, args, kwargs)
        future.add_done_callback(self._on_done)
        if self._tally is not None:
            future.add_done_callback(self._tally.future_done)
        self.wake()
        return future

    def submit_mpi(self, task: MPITask, calls: list[tuple[tuple, dict]], least: int = 1,
                   lanes: int = 1) -> list[TaskFuture]:
        """MPI tasks (one call per ``(args, kwargs)``), never bundled with ordinary calls:
        consecutive calls share a reservation, ``least`` at least, ``lanes`` groups
        at once (see mpicalls.py)."""
        futures = [TaskFuture() for _ in calls]
        with self._lock:
            if self._broken is not None:
                raise self._broken
            self._outstanding.update(futures)
        for future in futures:
            future.add_done_callback(self._on_done)
            if self._tally is not None:
                future.add_done_callback(self._tally.future_done)
        self._loop.call_soon(self.mpi_calls.start, futures, task, calls, least, lanes)
        return futures

    def send_chunk(self, fn: Callable[..., Any], chunk: list[tuple] | Rows,
                   depends: bool) -> TaskFuture:
        """Queue a map chunk cut by the engine (loop thread, sent by this flush)."""
        future = TaskFuture()
        with self._lock:
            broken = self._broken
            if broken is None:
                self._outstanding.add(future)
                options: dict[str, Any] = {}
                if not self.small():
                    # No results ahead of the chunk's end, and nothing given back: where
                    # hundreds of workers share a host's cores, an item's wall time says
                    # little of its cost, and chunks given back behind one held up by the
                    # host would multiply the scheduler's tasks (benchmarks/README.md).
                    options["early"] = options["give_back"] = False
                if self._tally is not None:  # the scheduler counts its calls where it ran
                    options["give_back"] = False
                if "give_back" not in options:  # behind an item far longer than expected
                    expect = self.batcher.durations.get(fn)
                    if expect is not None:
                        options["expect"] = expect
                self._queue.append((future, run_chunk_task, fn, (chunk,), options, depends))
        if broken is not None:
            settle(future, exception=broken)
        else:
            future.add_done_callback(self._on_done)
        return future

    def wake(self) -> None:
        """Have the loop thread plan and send what waits (any thread; coalesced)."""
        with self._lock:
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        self._loop.call_soon(self._flush)

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the loop thread soon (any thread), after what is queued there."""
        self._loop.call_soon(callback)

    def outstanding(self) -> list[TaskFuture]:
        """A copy of the futures not done yet: O(outstanding), for who must walk them."""
        with self._lock:
            return list(self._outstanding)

    def waiting(self) -> int:
        """How many futures are not done yet, without copying them (O(1): the
        watchdog and the adaptive target ask twice a second, with 10⁶ held)."""
        return len(self._outstanding)  # one read of a set's size is atomic

    def cancel_all(self) -> None:
        for future in self.outstanding():
            future.cancel()

    def _on_done(self, done: cf.Future[Any]) -> None:
        future = cast(TaskFuture, done)  # only ever a done-callback of our own futures
        with self._lock:
            self._outstanding.discard(future)
        if future.cancelled() and future._call.dask is not None:
            self._loop.call_soon(self._release, future)
        elif future.cancelled() and self.mpi_calls.asking(future):
            self._loop.call_soon(self.mpi_calls.cancelled, future)

    # ------------------------------------------------------------ loop thread
    @loop_thread_only
    def _release(self, future: TaskFuture) -> None:
        dask_future = future._call.dask
        future._call.drop_task()
        if dask_future is not None and not self._closing:
            self.in_background(self._client.cancel([dask_future]))

    @loop_thread_only
    def _flush(self) -> None:
        """Send the groups the engine cuts now, then every queued task."""
        with self._lock:
            self._flush_scheduled = False
        for stream, calls in self.batcher.plan():
            stream.dispatch(calls)
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            drained = self._drained
        if drained is None:
            self.sender.send_queued(items)
        else:  # queued just before the drain: never started
            for future, *_rest in items:
                settle(future, exception=drained)

    # ----------------------------------------------------------------- drain
    def drain(self, error: TimeLimitError) -> int:
        """Send nothing more: calls not started fail with ``error``, running ones finish.

        Returns how many calls were refused (any thread; only the first drain acts).
        """
        with self._lock:
            if self._drained is not None or self._broken is not None:
                return 0
            self._drained = error
            queued = list(self._queue)
            self._queue.clear()
        refused = len(queued)
        for stream, calls in self.batcher.drain():
            refused += len(calls)
            stream.drained(calls, error)
        for future, *_rest in queued:
            settle(future, exception=error)
        with self._lock:
            self.refused += refused
        return refused

    def call_later(self, delay: float, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the loop thread in ``delay`` s (loop thread)."""
        asyncio.get_running_loop().call_later(delay, callback)

    def ended(self) -> bool:
        """Whether the executor is closing or broken: no drain is needed any more."""
        return self._closing or self._broken is not None

    @property
    def drained(self) -> TimeLimitError | None:
        """The error of calls never started, once the executor drained."""
        return self._drained

    # ------------------------------------------------ for the engine's parts
    def in_background(self, awaitable: Any) -> asyncio.Future:
        """Run ``awaitable`` on the loop without waiting for it (kept alive until it
        ends; loop thread)."""
        task = asyncio.ensure_future(awaitable)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def small(self) -> bool:
        """Whether the launch is small (``batching.small_launch``): a group's finished
        calls travel ahead of its end."""
        return small_launch(self._total_threads)

    def send_held_now(self, future: TaskFuture) -> None:
        """Send a call still held for bundling at once, alone: it became an argument."""
        self.submits.send_now(future)

    def connection_lost(self) -> None:
        """The scheduler is gone: every outstanding call fails (unless closing)."""
        if not self._closing:
            self.break_executor(f"the connection to the scheduler at {self._address} was "
                                f"lost: {self.scheduler_pointer}", self.scheduler_lost_cause)

    # ------------------------------------------------------------ any thread
    def break_executor(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail every outstanding future: the executor can no longer run tasks."""
        with self._lock:
            if self._broken is None:
                kind = self.broken_type if cause is self.scheduler_lost_cause else \
                    BrokenHPCExecutor
                self._broken = kind(f"hpcfutures executor is broken: {reason}")
                self._broken.__cause__ = cause
            broken = self._broken
            victims = list(self._outstanding)
        (logger.info if self.stopped_by_signal else logger.error)("%s", broken)
        for future in victims:
            settle(future, exception=broken)

    @property
    def broken(self) -> BrokenHPCExecutor | None:
        return self._broken

    def closing(self) -> None:
        """From now on, lost Dask futures are part of shutting down, not a failure."""
        self._closing = True
        self._loop.call_soon(self.roster.flush)  # a summary of departures still held

    # ------------------------------------------------------------ the cluster
    def worker_threads(self) -> int:
        """Worker threads in the cluster, as last seen by the loop thread.  Any thread
        may ask; only the loop thread touches the Dask client (from another thread its
        methods block on the loop, a deadlock when the loop waits on the caller)."""
        return self._total_threads

    def worker_memory(self, timeout: float) -> dict[str, WorkerMemory]:
        """Each worker's memory, asked of the scheduler now (not from the loop thread)."""
        try:
            return self._loop.run_sync(ask_worker_memory(self._client), timeout)
        except TimeoutError as err:
            raise TimeoutError(
                f"the scheduler at {self._address} did not report its workers' memory "
                f"within {timeout:g} s (HPCFUTURES_TIMEOUT)") from err

    def workers_now(self, timeout: float) -> int:
        """Workers connected right now, asked of the scheduler (not from the loop thread)."""
        return self._loop.run_sync(self._live_workers(), timeout)

    def ask(self, question: Callable[[Any], Any], timeout: float) -> Any:
        """``await question(client)`` on the loop, answered within ``timeout`` s (not from it)."""
        return self._loop.run_sync(question(self._client), timeout)

    @loop_thread_only
    def cluster_changed(self, workers: int, threads: int, left: Sequence[str] = ()) -> None:
        """The scheduler's word on the workers and threads present, and on those that
        left since it last spoke (loop thread).

        Connections to a worker that left are dropped, and attempts to connect
        there end: Dask's connect retries a refused port for its whole timeout
        (30 s), holding a gather that asked it and one of Dask's five gather slots.
        """
        for address in left:
            self._client.rpc.remove(address, reason=f"worker {address} left the cluster")
        if left and not self._closing:
            # Named now, not at watch_workers' next look: the calls it held may be done
            # again elsewhere, and the launch end, before that.
            self.in_background(self.roster.refresh(
                self._client, self._is_closing, self.patience.ask_timeout))
        if workers < self._workers or left:
            self.completions.worker_left()
        self._workers = workers
        self._total_threads = max(1, threads)

    async def _live_workers(self) -> int:
        """Workers connected right now, asked of the scheduler (before breaking anything)."""
        from .. import _dask

        try:
            workers, threads = await asyncio.wait_for(_dask.cluster_size(self._client),
                                                      self.patience.ask_timeout)
        except Exception:  # the scheduler is gone: _watch breaks the executor for that
            return self._workers
        self.cluster_changed(workers, threads)
        return self._workers

    async def watch_workers(self, deadline: float, interval: float = 0.5) -> None:
        """Break the executor if tasks wait while no worker exists for ``deadline`` s.

        Without this, work submitted after the last worker died (killed,
        out of memory, node failure) would wait forever.
        """
        alone_since = None
        loop = asyncio.get_running_loop()
        await self.roster.refresh(self._client, self._is_closing,  # a worker may die soon
                                  self.patience.ask_timeout)
        while self._broken is None and not self._closing:
            await asyncio.sleep(interval)
            workers = self._workers
            if self.waiting():  # the scheduler's events say the same, but ask
                workers = await self._live_workers()
            if workers != len(self.roster.seen):
                await self.roster.refresh(self._client, self._is_closing,
                                          self.patience.ask_timeout)
            if not workers and not self._closing and self.waiting():
                # Calls wait and no worker can ever come (all died, or were
                # released as idle): say so now, not after `deadline`.
                none_left = await self.recovery.none_left()
                if none_left:
                    self.break_executor(none_left)
                    return
            if workers or not self.waiting():
                alone_since = None
                continue
            alone_since = alone_since or loop.time()
            if loop.time() - alone_since >= deadline:
                self.break_executor(
                    f"no worker has been connected for {deadline:g} s while "
                    f"{self.waiting()} task(s) waited: every worker is gone "
                    f"(killed, out of memory, or its node failed); {self.roster.describe_lost()}")

    @property
    def crash_status(self) -> int | None:
        """The exit status of the first worker a call killed, if one did (signals: 128+N)."""
        return self.recovery.crash_status

    def _is_closing(self) -> bool:
        return self._closing
