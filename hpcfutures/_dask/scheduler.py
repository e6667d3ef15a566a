"""The scheduler's side: Dask's scheduler with the Coordinator plug-in (coordinator.py)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import warnings
from collections.abc import Callable
from typing import Any

import distributed.scheduler
from distributed import Scheduler, Security
from distributed.core import Status

from . import tuning
from ._common import (
    DASHBOARD_ADDRESS,
    EXIT_FAILED,
    RELEASED_OP,
    VERDICT_OP,
    dashboard_cannot_stop,
)
from .coordinator import Coordinator
from .release import IdleRelease
from .versions import check_versions_once_per_installation

__all__ = ["SchedulerService"]

logger = logging.getLogger("hpcfutures")


#: Seconds the scheduler holds notices of removed workers for the survivors, so
#: that a wave of deaths reaches each of them as one message (see _Scheduler).
REMOVALS_WAIT = 0.05


#: Graphs of at most this many tasks are made ready on the scheduler's loop itself
#: (see _Scheduler.update_graph): a few single calls, a small map's batch.
INLINE_GRAPH_TASKS = 32

#: Set while the scheduler takes in a graph small enough to make ready inline.
_SMALL_GRAPH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hpcfutures_small_graph", default=False)

#: Dask's own offload, for every other graph.
_dask_offload = distributed.scheduler.offload


async def _offload_unless_small(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Dask's ``offload`` (a hop to a thread and back), except for a small graph."""
    if _SMALL_GRAPH.get():
        return func(*args, **kwargs)
    return await _dask_offload(func, *args, **kwargs)


def extensions_without_spans() -> dict[str, type]:
    """Dask's scheduler extensions, less its spans (``Scheduler(extensions=...)``).

    Dask's spans extension files every graph that arrives after the previous work
    ended under a new default span, and keeps every span, with the task groups it
    saw, for the life of the scheduler (for the dashboard's history).  An endless map
    sends dozens of graphs a second, each after a pause: the scheduler's memory would
    grow by megabytes a minute without end (``benchmarks/memory.py``, endless part).
    hpcfutures' calls never name a span, and its workers start without the spans
    extension of their own (``_dask/worker.py``), so none reports span metrics.  As
    Dask does when given no extensions, work stealing is left out where the
    configuration turns it off.
    """
    import dask

    chosen: dict[str, type] = {
        name: extension for name, extension in distributed.scheduler.DEFAULT_EXTENSIONS.items()
        if name != "spans"}
    if not dask.config.get("distributed.scheduler.work-stealing"):
        chosen.pop("stealing", None)
    return chosen


def _install_small_graph_offload() -> None:
    """Make ``update_graph``'s ``offload`` skip the thread for a small graph.

    Done when hpcfutures starts its scheduler, never at import: the name is the
    module's, so it is replaced for the process, but it changes nothing for any
    other scheduler (only a graph that ``_Scheduler`` marks small skips the
    thread).  Idempotent.
    """
    if distributed.scheduler.offload is not _offload_unless_small:
        distributed.scheduler.offload = _offload_unless_small


class _Scheduler(Scheduler):
    """Dask's scheduler, with three changes.

    No HTTP server unless the dashboard is asked for.  Dask always starts one
    (health, metrics and JSON pages even without the dashboard), and it answers
    anyone who can reach its port, without the launch's credentials: on
    loopback that is every user logged in to the node, and the pages show
    worker addresses, task keys, the running functions' names, call stacks and
    logs.  hpcfutures needs none of it.

    A removal is told only to the workers that may wait for the removed
    worker's data, and a wave's notices reach each of them together.  For
    every worker it removes, Dask tells every other worker ("remove-worker"),
    each telling a write of its own: D deaths among N workers are D x N
    messages, and each send to a worker of the wave not yet removed (its
    connection closed) schedules that worker's removal once more.  200 deaths
    among 2,000 workers are some 400,000 notices, which keep the scheduler busy
    for seconds, and the workers for longer, before the calls sent again can
    start (``benchmarks/scale.py`` kills a tenth of its workers).  A worker
    acts on the notice only for the data it was going to fetch from
    the removed worker: the dependencies of the tasks it was given.  So the
    notice goes to the workers processing a dependent of what the removed
    worker held (none, for a map's independent calls), held for
    :data:`REMOVALS_WAIT` s so that a wave's notices travel together.  A worker
    that was not told and still tries the dead address finds it refused and
    asks the scheduler again, as Dask's workers did before the notice existed.

    A task without dependencies is placed in O(1), however many workers there
    are.  Dask calls a task "root-ish" when its group (a map's tasks share one)
    is larger than twice the cluster's threads; with its queue off, as here
    (see :meth:`SchedulerService.start`), it places such a task by comparing
    every worker's objective, once per few tasks (Dask's
    ``decide_worker_rootish_queuing_disabled``): O(workers) a task, on the
    scheduler's loop, for a wave's calls sent again too.  Dask's own path
    for a dependency-free task that is not root-ish (an idle worker in turn, or
    any worker in turn when none is idle) is what such a task needs: it has no
    data to be near, and the client's batching already bounds what each worker
    is given.

    A small graph is made ready on the scheduler's loop.  Dask hands every
    graph it receives to a thread of its own twice (to build its tasks and to
    order them), and waits for each answer on the loop: right for a graph of
    thousands of tasks, which would hold the loop up, but for one call the two
    hops cost more than the work, and they lengthen every lone call's round
    trip (the round-trip row of ``benchmarks/run.py``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Worker -> the "remove-worker" notices waiting for it (see the class).
        self._removals: dict[str, list[dict[str, Any]]] = {}
        self._removals_due: asyncio.TimerHandle | None = None
        #: Worker being removed -> the workers that may wait for its data.
        self._waiting_for_data_of: dict[str, set[str]] = {}

    async def update_graph(self, *args: Any, **kwargs: Any) -> Any:
        # Dask's stream handler passes every field by name; (client, expr_ser, keys, ...).
        keys = kwargs["keys"] if "keys" in kwargs else args[2]
        token = _SMALL_GRAPH.set(len(keys) <= INLINE_GRAPH_TASKS)
        try:
            return await super().update_graph(*args, **kwargs)
        finally:
            _SMALL_GRAPH.reset(token)

    async def remove_worker(self, address: str, *args: Any, **kwargs: Any) -> Any:
        ws = self.workers.get(address)
        if ws is None:  # already removed (or an alias: then everyone is told, as by Dask)
            return await super().remove_worker(address, *args, **kwargs)
        self._waiting_for_data_of[address] = {
            dependent.processing_on.address for ts in ws.has_what
            for dependent in ts.dependents if dependent.processing_on is not None}
        try:
            return await super().remove_worker(address, *args, **kwargs)
        finally:
            self._waiting_for_data_of.pop(address, None)

    def is_rootish(self, ts: Any) -> bool:
        if math.isinf(self.WORKER_SATURATION) and not ts.dependencies:
            return False  # placed in O(1): see the class
        return bool(super().is_rootish(ts))

    def worker_send(self, worker: str, msg: dict[str, Any]) -> None:
        if msg.get("op") != "remove-worker":
            super().worker_send(worker, msg)
            return
        waiting = self._waiting_for_data_of.get(msg.get("worker", ""))
        if waiting is not None and worker not in waiting:
            return  # it needs nothing from the removed worker: see the class
        self._removals.setdefault(worker, []).append(msg)
        if self._removals_due is None:
            self._removals_due = asyncio.get_running_loop().call_later(
                REMOVALS_WAIT, self._send_removals)

    def _send_removals(self) -> None:
        self._removals_due = None
        waiting, self._removals = self._removals, {}
        if self.status in (Status.closing, Status.closed):  # the launch ended meanwhile
            return
        for worker, notices in waiting.items():
            if worker not in self.workers:  # removed meanwhile: nobody to tell
                continue
            for notice in notices:
                super().worker_send(worker, notice)  # sent together (BatchedSend)

    def start_http_server(self, routes: Any, dashboard_address: Any, default_port: int = 0,
                          ssl_options: Any = None) -> None:
        if dashboard_address is None:  # what SchedulerService passes without the dashboard
            return
        super().start_http_server(  # type: ignore[no-untyped-call]
            routes, dashboard_address, default_port=default_port, ssl_options=ssl_options)


class SchedulerService:
    """A Dask scheduler in this process, with the coordinator attached."""

    def __init__(self, *, host: str | None, interface: str | None,
                 security: Security | None = None, keep_serving: bool = False,
                 dashboard: bool = False, dashboard_address: str | None = None,
                 expected_workers: int | None = None) -> None:
        tuning.apply()
        check_versions_once_per_installation()
        self.coordinator = Coordinator(keep_serving, expected_workers)
        if dashboard and dashboard_cannot_stop():
            dashboard = False  # the client warns, with the reason (cluster.dashboard_facts)
        self._options: dict[str, Any] = dict(
            host=host,
            interface=interface,
            protocol="tls" if security is not None else None,
            port=0,
            # Without bokeh Dask serves a page saying so; the client warns.
            dashboard=dashboard,
            # None: no HTTP server at all (see _Scheduler).
            dashboard_address=(dashboard_address or DASHBOARD_ADDRESS) if dashboard else None,
            plugins=[self.coordinator],
            security=security,
            validate=False,
        )
        # A task whose worker died comes back to the client at once (KilledWorker), which
        # knows whether the task killed it (see deaths.py): Dask must not retry it blindly
        # on the next worker, on any launch (a serving one included).
        self._options["allowed_failures"] = 0
        self._scheduler: Scheduler | None = None
        self._background: list[asyncio.Task[None]] = []

    @property
    def address(self) -> str:
        assert self._scheduler is not None
        return self._scheduler.address

    async def start(self) -> SchedulerService:
        """Start the scheduler on the running event loop (Dask binds it to that loop)."""
        _install_small_graph_offload()
        with warnings.catch_warnings():
            # A taken dashboard port is replaced by a free one; the client's
            # dashboard line gives the port in use, so Dask's warning is noise.
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            with tuning.stealing_often(self.coordinator.expected_workers), \
                    tuning.without_a_queue():
                scheduler = _Scheduler(**self._options, extensions=extensions_without_spans())
        self._scheduler = await scheduler
        return self

    def expect_at_most(self, workers: int) -> None:
        """The launch can never have more than ``workers`` workers (the laptop's
        local worker processes): once all are gone, none is left."""
        self.coordinator.deaths.capacity = workers

    def release_idle_workers(self, idle_after: float, keep: int) -> IdleRelease:
        """Retire workers idle for ``idle_after`` s (see :mod:`.release`) from now on."""
        assert self._scheduler is not None
        scheduler = self._scheduler

        def say_goodbye(address: str) -> None:
            # The worker's rank exits with this status: done, not failed.
            scheduler.worker_send(address, {"op": VERDICT_OP, "status": 0})

        groups = self.coordinator.groups
        release = IdleRelease(scheduler, idle_after, keep, say_goodbye,
                              started=self.coordinator.client_seen.is_set, held=groups.holds)
        groups.unavailable = lambda: release.retiring
        expected = self.coordinator.expected_workers
        if expected is not None:  # a released worker never comes back
            groups.capacity = lambda: expected - len(release.released)
        scheduler.handlers[RELEASED_OP] = lambda: list(release.released)
        task = asyncio.ensure_future(release.run())
        self._background.append(task)
        return release

    async def serve(self, client_timeout: float, idle_timeout: float | None = None) -> int:
        """Serve until the client says it is done; return the launch's exit status.

        A serving launch (``keep_serving``) has no client of its own: it serves
        until stopped, or until no client was connected for ``idle_timeout`` s.
        """
        if self.coordinator.keep_serving:
            return await self.coordinator.until_stopped(idle_timeout)
        try:
            await asyncio.wait_for(self.coordinator.client_seen.wait(), client_timeout)
        except asyncio.TimeoutError:
            self.coordinator.end(
                EXIT_FAILED,
                f"no client connected within {client_timeout:g} s; the client rank "
                "probably failed before creating its Executor (see its output)",
            )
        await self.coordinator.done.wait()
        return self.coordinator.verdict if self.coordinator.verdict is not None else EXIT_FAILED

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        if self._scheduler is not None:
            await self._scheduler.close(reason="hpcfutures: launch finished")
            await _close_late_streams(self._scheduler)


#: Seconds the close gives the streams of workers that joined while it ran.
LATE_STREAMS_CLOSE = 5.0


async def _close_late_streams(scheduler: Scheduler, timeout: float = LATE_STREAMS_CLOSE) -> None:
    """Flush and close the streams of workers that registered while Dask closed.

    Dask's close closes the workers' streams it has when it starts; one that
    registered meanwhile (a large launch whose client finished before every
    worker joined) was sent the verdict, but nothing flushes that stream before
    the rank's process exits, and its worker takes the lost connection for a
    lost scheduler.
    """
    late = [stream for stream in list(scheduler.stream_comms.values()) if not stream.closed()]
    for stream in late:
        with contextlib.suppress(Exception):
            stream.send({"op": "close", "reason": "hpcfutures: launch finished"})
    if late:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(stream.close() for stream in late), return_exceptions=True),
                timeout)
