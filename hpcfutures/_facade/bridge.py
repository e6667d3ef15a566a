"""The bridge between ``concurrent.futures`` futures and Dask futures.

Data flow (client process)::

    user thread                        loop thread (one asyncio loop)
    ───────────                        ──────────────────────────────
    submit() ─ append to _queue ─────> _flush(): client.submit(...) per item
                                          │   (sent in batches over Dask's
                                          │    batched stream: no round trip)
                                       _watch(): await completion (streamed
                                          │   by the scheduler, no round trip)
                                       _gather_ready(): one gather per batch
    TaskFuture.result() <── set_result ───┘

A :class:`TaskFuture` is a real :class:`concurrent.futures.Future`; it keeps its
Dask future so that passing it to another ``submit`` makes a dependency that
Dask resolves worker to worker.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .._errors import BrokenHPCExecutor
from .._remote.calls import pick, restore_traceback, run_chunk_task, run_task
from .._support.loop import LoopThread
from .bundles import Bundler
from .capacity import WorkerMemory, ask_worker_memory
from .durations import Durations
from .roster import WorkerRoster

__all__ = ["TaskBridge", "TaskFuture"]

logger = logging.getLogger("hpcfutures")


class TaskFuture(cf.Future):
    """A ``concurrent.futures.Future`` for a task of an hpcfutures executor."""

    def __init__(self) -> None:
        super().__init__()
        self._dask: Any = None
        self._bridge: TaskBridge | None = None
        #: (bundle future, index) once sent inside a bundle (see _bundles.py).
        self._bundle: tuple[TaskFuture, int] | None = None


def _settle(future: cf.Future, result: Any = None, exception: BaseException | None = None) -> None:
    """Complete ``future`` unless the user cancelled it (or it is already done).

    A future may already be RUNNING (sent to a worker inside a bundle, so it
    can no longer be cancelled, as with ``ProcessPoolExecutor``).
    """
    if not future.running():
        try:
            if not future.set_running_or_notify_cancel():
                return
        except RuntimeError:  # finished meanwhile (e.g. failed by a broken executor)
            if not future.running():
                return
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except cf.InvalidStateError:
        pass  # settled by another path first (a broken executor)


class TaskBridge:
    """Submits tasks to Dask from any thread and settles their futures."""

    def __init__(self, loop: LoopThread, client: Any, address: str, threads: int = 1) -> None:
        self._loop = loop
        self._client = client
        self._address = address
        self._lock = threading.Lock()
        self._queue: collections.deque = collections.deque()
        self._flush_scheduled = False
        self._outstanding: set[TaskFuture] = set()
        self._ready: list[tuple[Any, TaskFuture]] = []
        self._gathering = False
        self._broken: BrokenHPCExecutor | None = None
        self._closing = False
        self._prefix = f"hpcf-{uuid.uuid4().hex[:8]}-"
        self._counter = itertools.count()
        self._total_threads = max(1, threads)
        self._workers = 1  # at least the one the client waited for
        #: Set when SIGTERM stops the launch: its breaking is then expected.
        self.stopped_by_signal = False
        self._bundler = Bundler(self)
        #: Seconds per call by function, shared by map chunks and submit bundles.
        self.durations = Durations()
        #: Counts the calls that came back, for the end-of-run summary (None: off).
        self.tally: Any = None
        #: How errors name the scheduler's rank and a worker's (set by the client side).
        self.scheduler_pointer = "the scheduler's process probably died; see its output"
        #: Names the workers that leave early (its ``pointer`` is set by the client side).
        self.roster = WorkerRoster()

    # ------------------------------------------------------------ user thread
    def submit(self, fn: Callable[..., Any], args: tuple, kwargs: dict,
               runner: Callable[..., Any] = run_task) -> TaskFuture:
        future = TaskFuture()
        future._bridge = self
        with self._lock:
            if self._broken is not None:
                raise self._broken
            self._outstanding.add(future)
            if runner is run_task and not _mentions_task_future(args, kwargs):
                self._bundler.hold(future, fn, args, kwargs)
            else:
                self._queue.append((future, runner, fn, args, kwargs))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        future.add_done_callback(self._on_done)
        if self.tally is not None and runner is run_task:
            future.add_done_callback(self.tally.future_done)
        if schedule:
            self._loop.call_soon(self._flush)
        return future

    def outstanding(self) -> list[TaskFuture]:
        with self._lock:
            return list(self._outstanding)

    def cancel_all(self) -> None:
        for future in self.outstanding():
            future.cancel()

    def _on_done(self, future: TaskFuture) -> None:
        with self._lock:
            self._outstanding.discard(future)
        if future.cancelled() and future._dask is not None:
            self._loop.call_soon(self._release, future)

    # ------------------------------------------------------------ loop thread
    def _release(self, future: TaskFuture) -> None:
        dask_future, future._dask = future._dask, None
        if dask_future is not None and not self._closing:
            asyncio.ensure_future(self._client.cancel([dask_future]))

    def _flush(self) -> None:
        """Send queued tasks (one graph per runner: one message, not one per task),
        then let the bundler send what there is room for."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._flush_scheduled = False
        self._send_queued(items)
        self._bundler.pump()

    def _send_queued(self, items: list[tuple]) -> None:
        groups: dict[Any, list] = {}
        for future, runner, fn, args, kwargs in items:
            if future.done():
                continue
            try:
                args, kwargs = self._resolve(runner, args, kwargs)
            except _NotSentYet:
                # A dependency is queued in this very batch: send what came before it.
                self._send_groups(groups)
                groups = {}
                args, kwargs = self._resolve(runner, args, kwargs)
            except Exception as err:
                _settle(future, exception=_submission_error(fn, err))
                continue
            name = getattr(fn, '__name__', 'task')
            if runner is run_chunk_task:  # "-x<n>": the calls it carries (see _summary.py)
                name = f"{name}-x{len(args[0])}"
            key = f"{self._prefix}{name}-{next(self._counter)}"
            groups.setdefault(runner, []).append((future, fn, args, kwargs, key))
        self._send_groups(groups)

    def _send_groups(self, groups: dict[Any, list]) -> None:
        for runner, group in groups.items():
            self._send(runner, group)

    def _send(self, runner: Callable[..., Any], group: list) -> None:
        try:
            dask_futures = self._client.map(
                runner, *zip(*[(fn, args, kwargs) for _, fn, args, kwargs, _ in group]),
                key=[key for *_, key in group], pure=False)
        except Exception:
            # Something in the batch cannot be sent: send one by one, so that
            # only the culprit fails.
            dask_futures = [self._send_one(runner, item) for item in group]
        for (future, *_), dask_future in zip(group, dask_futures):
            if dask_future is None:
                continue
            future._dask = dask_future
            asyncio.ensure_future(self._watch(dask_future, future))

    def _send_one(self, runner: Callable[..., Any], item: tuple) -> Any:
        future, fn, args, kwargs, key = item
        try:
            # A fresh key: Dask already registered the failed batch's keys and
            # would hand back those never-to-finish futures.
            return self._client.submit(runner, fn, args, kwargs, key=f"{key}-alone", pure=False)
        except Exception as err:
            _settle(future, exception=_submission_error(fn, err))
            return None

    # ------------------------------------------------- services to the bundler
    def launch_internal(self, runner: Callable[..., Any], args: tuple,
                        name: str) -> TaskFuture | None:
        """Send one task of the library's own (a bundle); None if it cannot be pickled."""
        key = f"{self._prefix}{name}-{next(self._counter)}"
        try:
            dask_future = self._client.submit(runner, *args, key=key, pure=False)
        except Exception:
            logger.debug("could not send %s as one task", key, exc_info=True)
            return None
        internal = TaskFuture()
        internal._dask = dask_future
        asyncio.ensure_future(self._watch(dask_future, internal))
        return internal

    def launch_alone(self, future: TaskFuture, fn: Callable[..., Any], args: tuple,
                     kwargs: dict) -> None:
        """Send one user call as its own Dask task (its failure stays its own)."""
        key = f"{self._prefix}{getattr(fn, '__name__', 'task')}-{next(self._counter)}"
        dask_future = self._send_one(run_task, (future, fn, args, kwargs, key))
        if dask_future is not None:
            future._dask = dask_future
            asyncio.ensure_future(self._watch(dask_future, future))

    settle = staticmethod(lambda future, result=None, exception=None:
                          _settle(future, result, exception))

    def _resolve(self, runner: Callable[..., Any], args: tuple,
                 kwargs: dict) -> tuple[tuple, dict]:
        """Arguments with this executor's futures replaced by Dask futures."""
        handle = self._dask_handle
        if runner is run_chunk_task:  # args == (chunk,): a list of per-item argument tuples
            return ([_as_dependencies(item, handle) for item in args[0]],), kwargs
        return _as_dependencies(args, handle), _as_dependencies(kwargs, handle)

    def _dask_handle(self, future: TaskFuture) -> Any:
        """The Dask future standing for ``future``'s result, made on demand."""
        if future._dask is not None:
            return future._dask
        if future.cancelled():
            raise cf.CancelledError("a future passed as an argument was cancelled")
        if future._bundle is None and not future.done():
            self._bundler.send_now(future)
        if future._bundle is not None:
            bundle, index = future._bundle
            key = f"{self._prefix}pick-x0-{next(self._counter)}"  # runs no call
            future._dask = self._client.submit(pick, bundle._dask, index, key=key, pure=False)
            return future._dask
        if future.done():
            return future.result()  # failed before it was sent: raises its error
        raise _NotSentYet

    def worker_threads(self) -> int:
        """Worker threads in the cluster, as last seen by the loop thread.

        Any thread may ask; none but the loop thread touches the Dask client
        (from another thread its methods turn into blocking calls into the
        loop, which deadlocks when the loop waits on the caller).
        """
        return self._total_threads

    def worker_memory(self, timeout: float) -> dict[str, WorkerMemory]:
        """Each worker's memory, asked of the scheduler now (not from the loop thread)."""
        try:
            return self._loop.run_sync(ask_worker_memory(self._client), timeout)
        except TimeoutError as err:
            raise TimeoutError(
                f"the scheduler at {self._address} did not report its workers' memory "
                f"within {timeout:g} s (HPCFUTURES_TIMEOUT)") from err

    def cluster_changed(self, workers: int, threads: int) -> None:
        """The scheduler's word on the workers and threads present (loop thread)."""
        self._workers = workers
        self._total_threads = max(1, threads)

    async def _watch(self, dask_future: Any, future: TaskFuture) -> None:
        exception = await dask_future.exception()
        status = dask_future.status
        if status == "finished":
            self._ready.append((dask_future, future))
            if not self._gathering:
                self._gathering = True
                asyncio.ensure_future(self._gather_ready())
        elif status == "error":
            _settle(future, exception=restore_traceback(exception))
        elif not future.done() and not self._closing:
            self.break_executor(
                f"the connection to the scheduler at {self._address} was lost: "
                f"{self.scheduler_pointer}"
            )

    async def _gather_ready(self) -> None:
        """Fetch finished results in batches: one round trip for many tasks."""
        try:
            while self._ready:
                batch, self._ready = self._ready, []
                wanted = [(d, f) for d, f in batch if not f.done()]
                if not wanted:
                    continue
                try:
                    values = await self._client.gather([d for d, _ in wanted])
                except Exception:
                    values = None
                if values is None:
                    await self._gather_one_by_one(wanted)
                    continue
                for (_, future), value in zip(wanted, values):
                    _settle(future, result=value)
        finally:
            self._gathering = False

    async def _gather_one_by_one(self, batch: list[tuple[Any, TaskFuture]]) -> None:
        for dask_future, future in batch:
            try:
                value = await self._client.gather(dask_future)
            except Exception as err:
                _settle(future, exception=restore_traceback(err))
            else:
                _settle(future, result=value)

    async def _live_workers(self) -> int:
        """Workers connected right now, asked of the scheduler (before breaking anything)."""
        from .. import _dask

        try:
            workers, threads = await asyncio.wait_for(_dask.cluster_size(self._client), 5)
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
        await self.roster.refresh(self._client, self._is_closing)  # a worker may die soon
        while self._broken is None and not self._closing:
            await asyncio.sleep(interval)
            workers = self._workers
            if self.outstanding():  # the scheduler's events say the same, but ask
                workers = await self._live_workers()
            if workers != len(self.roster.seen):
                await self.roster.refresh(self._client, self._is_closing)
            if workers or not self.outstanding():
                alone_since = None
                continue
            alone_since = alone_since or loop.time()
            if loop.time() - alone_since >= deadline:
                self.break_executor(
                    f"no worker has been connected for {deadline:g} s while "
                    f"{len(self.outstanding())} task(s) waited: every worker is gone "
                    f"(killed, out of memory, or its node failed); {self.roster.describe_lost()}")

    def _is_closing(self) -> bool:
        return self._closing

    # ------------------------------------------------------------ any thread
    def break_executor(self, reason: str) -> None:
        """Fail every outstanding future: the executor can no longer run tasks."""
        with self._lock:
            if self._broken is None:
                self._broken = BrokenHPCExecutor(f"hpcfutures executor is broken: {reason}")
            broken = self._broken
            victims = list(self._outstanding)
        (logger.info if self.stopped_by_signal else logger.error)("%s", broken)
        for future in victims:
            _settle(future, exception=broken)

    @property
    def broken(self) -> BrokenHPCExecutor | None:
        return self._broken

    def closing(self) -> None:
        """From now on, lost Dask futures are part of shutting down, not a failure."""
        self._closing = True


def _mentions_task_future(args: tuple, kwargs: dict) -> bool:
    """Whether any argument (or an element of a list/tuple/dict argument) is a TaskFuture."""
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, TaskFuture):
            return True
        if isinstance(value, (list, tuple)) and any(isinstance(v, TaskFuture) for v in value):
            return True
        if isinstance(value, dict) and any(isinstance(v, TaskFuture) for v in value.values()):
            return True
    return False


class _NotSentYet(Exception):
    """A future used as an argument is still waiting in the submission queue."""


def _as_dependencies(value: Any, handle: Callable[[TaskFuture], Any]) -> Any:
    """Replace this executor's futures in arguments by ``handle(future)``.

    Looks at the arguments themselves and one level into lists, tuples and
    dicts, which covers ``submit(f, fut)`` and ``submit(f, [fut1, fut2])``.
    """
    if isinstance(value, TaskFuture):
        return handle(value)
    if isinstance(value, tuple):
        if any(isinstance(v, (TaskFuture, list, tuple, dict)) for v in value):
            return tuple(_one_level(v, handle) for v in value)
        return value
    if isinstance(value, dict):
        return {k: _one_level(v, handle) for k, v in value.items()}
    return value


def _one_level(value: Any, handle: Callable[[TaskFuture], Any]) -> Any:
    def swap(v: Any) -> Any:
        return handle(v) if isinstance(v, TaskFuture) else v

    if isinstance(value, TaskFuture):
        return handle(value)
    if isinstance(value, list) and any(isinstance(v, TaskFuture) for v in value):
        return [swap(v) for v in value]
    if isinstance(value, tuple) and any(isinstance(v, TaskFuture) for v in value):
        return tuple(swap(v) for v in value)
    if isinstance(value, dict) and any(isinstance(v, TaskFuture) for v in value.values()):
        return {k: swap(v) for k, v in value.items()}
    return value


def _submission_error(fn: Callable[..., Any], err: Exception) -> Exception:
    """Explain why a task could not even be sent (usually: it cannot be pickled)."""
    name = getattr(fn, "__qualname__", repr(fn))
    if isinstance(err, (cf.CancelledError, RuntimeError)) and "argument" in str(err):
        return err
    wrapped = TypeError(
        f"could not send task {name!r} to the cluster: {type(err).__name__}: {err}. "
        "The function and its arguments must be picklable with cloudpickle (no open "
        "files, locks, sockets or generators)"
    )
    wrapped.__cause__ = err
    return wrapped
