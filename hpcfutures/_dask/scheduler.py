"""The scheduler's side: the Coordinator plug-in that knows when the launch ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import warnings
from typing import Any

from distributed import Scheduler, Security
from distributed.core import Status
from distributed.diagnostics.plugin import SchedulerPlugin

from .._support.logs import quiet_for_shutdown
from . import tuning
from ._common import (
    AWAIT_WORKERS_OP,
    CLUSTER_TOPIC,
    DASHBOARD_ADDRESS,
    EXIT_FAILED,
    FINISH_OP,
    HOST_KEY,
    RELEASED_OP,
    SCRATCH_KEY,
    STARTUP_FAILED_OP,
    STARTUP_TOPIC,
    VERDICT_OP,
    _hurry,
)
from .cluster import WorkerChanges
from .deaths import AWAIT_DEATH_OP, Deaths, WaveLog
from .mpigroups import MEMBER_ENDS, RankGroups
from .release import IdleRelease
from .versions import check_versions_once_per_installation

__all__ = ["ClusterSize", "Coordinator", "SchedulerService"]

logger = logging.getLogger("hpcfutures")


class ClusterSize:
    """How many workers and threads the launch has now, told to the clients.

    The client sizes its maps from this (see ``follow_cluster``).  Counting
    ``scheduler.workers`` on every join and leave made a 10,000-rank ramp
    O(W²) (3 s of the scheduler's loop over the joins, 5 s over the leaves):
    here the totals are running sums kept on each join and leave, with each
    worker's threads remembered from its join (a leaving worker is counted out
    at once, whether or not Dask still lists it).  A burst of joins or leaves
    within one turn of the event loop (a herd registering, a node lost) is
    announced once, at the end of that turn, with the totals then: the
    clients see the same final numbers, as promptly, and one event instead of
    one per worker.
    """

    def __init__(self) -> None:
        self.threads_of: dict[str, int] = {}
        self.workers = 0
        self.threads = 0
        self._scheduler: Scheduler | None = None
        self._pending = False

    def joined(self, scheduler: Scheduler, worker: str) -> None:
        ws = scheduler.workers.get(worker)
        if ws is None or worker in self.threads_of:
            return
        self.threads_of[worker] = ws.nthreads
        self.workers += 1
        self.threads += ws.nthreads
        self._announce(scheduler)

    def left(self, scheduler: Scheduler, worker: str) -> None:
        threads = self.threads_of.pop(worker, None)
        if threads is None:
            return
        self.workers -= 1
        self.threads -= threads
        self._announce(scheduler)

    def _announce(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        if self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # nothing to announce later from: at once
            self.announce_now()
            return
        self._pending = True
        loop.call_soon(self.announce_now)

    def announce_now(self) -> None:
        """Log the cluster event with the totals as they are now."""
        self._pending = False
        if self._scheduler is not None:
            self._scheduler.log_event(CLUSTER_TOPIC, {"workers": self.workers,
                                                      "threads": self.threads})


class Coordinator(SchedulerPlugin):
    """Scheduler plug-in that knows when the launch is over, and how it ended.

    With ``keep_serving`` (``hpcfutures serve``) the launch has no client of
    its own: clients from outside come and go, and none of them ends it; a stop
    request (``hpcfutures_stop``), a signal or the idle timeout does.

    A worker that fails to start says why (``hpcfutures_startup_failed``).
    Once no worker can come any more (all ``expected_workers`` failed; where
    their number is unknown, none had joined yet) that is the launch's
    failure: the client, waiting for its first worker, gets the reason at once
    instead of a timeout a minute later.  Otherwise the client is warned and
    the launch goes on with the other workers.
    """

    name = "hpcfutures-coordinator"

    def __init__(self, keep_serving: bool = False, expected_workers: int | None = None) -> None:
        self.verdict: int | None = None
        self.requested: int | None = None
        self.reason = ""
        self.client_id: str | None = None
        self.client_seen = asyncio.Event()
        self.done = asyncio.Event()
        self.scheduler: Scheduler | None = None
        self.keep_serving = keep_serving
        #: Serving launch: the clients connected now, and since when there are none.
        self.clients: set[str] = set()
        self.idle_since = time.monotonic()
        #: Worker ranks in the launch (None: not known), those that joined, and
        #: what those that failed to start said.
        self.expected_workers = expected_workers
        self.joined = 0
        self.startup_failures: list[str] = []
        #: Why no worker will come, once that is so; the client is told.
        self.hopeless: str | None = None
        self._workers_changed = asyncio.Event()
        #: The workers and threads present, announced to the clients.
        self.size = ClusterSize()
        #: One line for a failed start, one summary for a wave of them.
        self._startup_log = WaveLog(logger, "worker failed to start", "workers failed to start")
        self._scratch_log = WaveLog(logger, "worker was slow to create its scratch directory",
                                    "workers were slow to create their scratch directories")
        #: Dead workers' certificates, and whether any worker is left (deaths.py).
        self.deaths = Deaths()
        #: Workers reserved for MPI tasks (mpigroups.py).
        self.groups = RankGroups()
        #: Joins and departures, for the client's roster (cluster.py).
        self.worker_changes = WorkerChanges()
        if expected_workers is not None:
            self.groups.capacity = lambda: expected_workers
        if not keep_serving:
            self.deaths.capacity = expected_workers

    async def start(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        scheduler.handlers["hpcfutures_register"] = self._register
        # The goodbye comes on the client's stream, ahead of Dask's "close-client".
        scheduler.stream_handlers[FINISH_OP] = self._finish
        scheduler.handlers[RELEASED_OP] = lambda: []  # until idle release is on
        scheduler.handlers[STARTUP_FAILED_OP] = self._startup_failed
        scheduler.handlers[AWAIT_WORKERS_OP] = self._await_workers
        scheduler.handlers[AWAIT_DEATH_OP] = self._await_death
        self.deaths.install(scheduler)
        self.groups.install(scheduler)
        self.worker_changes.install(scheduler)
        if self.keep_serving:
            scheduler.handlers["hpcfutures_stop"] = self._stop

    async def close(self) -> None:
        """The scheduler closes: log the summaries that waves still hold."""
        self.deaths.flush_log()
        self.deaths.uninstall()
        self._startup_log.flush()
        self._scratch_log.flush()

    def _register(self, client: str) -> str:
        if self.keep_serving:
            self.clients.add(client)
        else:
            self.client_id = client
        self.client_seen.set()
        assert self.scheduler is not None
        _hurry(self.scheduler.client_comms.get(client))
        return "ok"

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.joined += 1
        self._workers_changed.set()
        _hurry(scheduler.stream_comms.get(worker))
        if self.verdict is not None:
            # It joined after the end: without the verdict it would take the
            # scheduler's closing for a failure, and its rank would exit 1.
            scheduler.worker_send(worker, {"op": VERDICT_OP, "status": self.verdict})
        self.size.joined(scheduler, worker)
        self.worker_changes.joined(scheduler, worker)
        self.groups.worker_joined(worker)
        self._tell_of_slow_scratch(scheduler, worker)

    def _tell_of_slow_scratch(self, scheduler: Scheduler, worker: str) -> None:
        """A worker whose scratch directory took over a second to create (Dask warned of it
        in every such worker: dozens of lines when 150 start on one node): one line, and
        a summary line for a wave of them."""
        state = scheduler.workers.get(worker)
        said = getattr(state, "extra", {}).get(SCRATCH_KEY) if state is not None else None
        if not isinstance(said, dict):
            return
        where = str(said.get("directory"))
        host = getattr(state, "extra", {}).get(HOST_KEY)
        who = f"{getattr(state, 'name', worker)}" + (f" on {host}" if host else "")
        self._scratch_log.add(
            f"{who} took {float(said.get('seconds', 0)):.1f} s to create its scratch directory "
            f"in {where} (many workers starting at once on one node queue on its lock files, "
            "or it is on a network file system: DASK_TEMPORARY_DIRECTORY=<a local disk> "
            "moves it)",
            f"in {where}" + (f" on {host}" if host else ""))

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        # Dask may call this before or after it drops the worker from
        # scheduler.workers: neither count here looks there.
        if self.verdict is None:
            self.deaths.departed_worker(worker)
            self.groups.worker_left(worker)
        self.size.left(scheduler, worker)
        self.worker_changes.left(worker)
        self.groups.worker_gone(worker)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish in MEMBER_ENDS:  # an MPI task's member may free its group
            self.groups.member_ended(key)

    async def _await_death(self, worker: str = "", timeout: float = 0.0,
                           workers: list[str] | None = None) -> dict[str, Any]:
        """A dead worker's certificate (waiting up to ``timeout`` s for its watcher),
        and why no worker is left, if none is; for ``workers``, each one's answer
        (``{"answers": {worker: answer}}``: a wave asked in one request).

        O(1) per dead worker, however many workers there are."""
        if workers is not None:
            answers = await asyncio.gather(*(self._await_death(w, timeout) for w in workers))
            return {"answers": dict(zip(workers, answers, strict=True))}
        certificate = (await self.deaths.await_certificate(worker, timeout)) if worker else None
        present = self.size.workers - (worker in self.size.threads_of)
        none_left = None
        if self.deaths.none_left(present, self.joined, len(self.startup_failures)):
            none_left = await self.deaths.why_none_left(timeout)
        return {"certificate": certificate, "none_left": none_left}

    def _startup_failed(self, who: str, why: str) -> str:
        """A worker rank could not start (a setting only it could reject, say)."""
        text = f"{who} failed to start: {why}"
        self.startup_failures.append(text)
        # A broken module path or a full /tmp fails every rank of a node at once.
        self._startup_log.add(text, why.splitlines()[0][:200] if why else "no reason given")
        expected = self.expected_workers
        failed = len(self.startup_failures)
        if self.hopeless is None and (failed >= expected if expected else self.joined == 0):
            first = self.startup_failures[0]
            self.hopeless = first if failed == 1 else (
                f"{first} (and {failed - 1} other worker(s) after it: see the scheduler's log)")
        assert self.scheduler is not None
        self.scheduler.log_event(STARTUP_TOPIC, {"failure": text, "fatal": self.hopeless})
        self._workers_changed.set()
        return "ok"

    async def _await_workers(self, timeout: float) -> dict[str, Any]:
        """Answer once a worker is there, or once none can come (then say why);
        ``{"workers": 0}`` after ``timeout`` seconds."""
        assert self.scheduler is not None
        deadline = time.monotonic() + timeout
        while True:
            failures = list(self.startup_failures)
            if self.scheduler.workers:
                return {"workers": len(self.scheduler.workers), "failures": failures}
            if self.hopeless is not None:
                return {"workers": 0, "failed": self.hopeless, "failures": failures}
            left = deadline - time.monotonic()
            if left <= 0:
                return {"workers": 0, "failures": failures}
            self._workers_changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._workers_changed.wait(), left)

    def _finish(self, status: int, **_: Any) -> None:
        # The launch ends when the client disconnects right after this message
        # (the same stream brings its "close-client" next): the client's keys were
        # released before, so closing the workers loses nothing anyone still wants.
        self.requested = int(status)

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        if client in self.clients:
            self.clients.discard(client)
            if not self.clients:
                self.idle_since = time.monotonic()
        if client != self.client_id:
            return
        if self.requested is None:
            self.end(EXIT_FAILED, "the client's connection was lost before it finished")
        elif self.requested == 0:
            self.end(0, "the client finished")
        elif self.hopeless is not None and not scheduler.workers:
            self.end(self.requested, self.hopeless)
        else:
            # The client's block ended with an exception (or sys.exit(N), Ctrl-C):
            # whether that ends the client's program is the program's business (it
            # may catch it, save what it has, and end well).  The other ranks end
            # well either way; the client's process status is the launch's.
            logger.info("the client left its executor with status %d (an exception, or "
                        "sys.exit): ending the launch; the client's own exit status is the "
                        "launch's", self.requested)
            self.end(0, f"the client left with status {self.requested}")

    def end(self, status: int, reason: str) -> None:
        """Record the verdict once and pass it to every connected worker."""
        if self.verdict is not None:
            return
        self.verdict, self.reason = status, reason
        if status != 0:
            logger.warning("ending the launch with status %d: %s", status, reason)
        quiet_for_shutdown()
        assert self.scheduler is not None
        for stream in list(self.scheduler.stream_comms.values()):
            with contextlib.suppress(Exception):
                stream.send({"op": VERDICT_OP, "status": status})
        self.done.set()

    def _stop(self, reason: str = "") -> str:
        self.end(0, reason or "a stop was requested")
        return "ok"

    async def until_stopped(self, idle_timeout: float | None = None) -> int:
        """Serving launch: wait for a stop (or ``idle_timeout`` s without a client)."""
        while not self.done.is_set():
            idle = 0.0 if self.clients else time.monotonic() - self.idle_since
            if idle_timeout is not None and idle >= idle_timeout:
                self.end(0, f"no client was connected for {idle_timeout:g} s (idle timeout)")
                break
            wait = None if idle_timeout is None else max(idle_timeout - idle, 0.05)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.done.wait(), wait)
        return self.verdict if self.verdict is not None else EXIT_FAILED


#: Seconds the scheduler holds notices of removed workers for the survivors, so
#: that a wave of deaths reaches each of them as one message (see _Scheduler).
REMOVALS_WAIT = 0.05


class _Scheduler(Scheduler):
    """Dask's scheduler, with two changes.

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
    connection closed) schedules that worker's removal once more.  At 2,000
    workers with 200 killed, the 360,000 notices kept the scheduler busy for
    seconds and the workers (hosted 180 to a process by the harness) for half a
    minute before the calls sent again could start (``benchmarks/scale.py``).
    A worker acts on the notice only for the data it was going to fetch from
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
    every worker's objective, once per few tasks.  At 2,000 workers the calls
    sent again after 200 workers died blocked the scheduler's loop for 10-13 s
    (``py-spy``: ``decide_worker_rootish_queuing_disabled``).  Dask's own path
    for a dependency-free task that is not root-ish (an idle worker in turn, or
    any worker in turn when none is idle) is what such a task needs: it has no
    data to be near, and the client's batching already bounds what each worker
    is given.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Worker -> the "remove-worker" notices waiting for it (see the class).
        self._removals: dict[str, list[dict[str, Any]]] = {}
        self._removals_due: asyncio.TimerHandle | None = None
        #: Worker being removed -> the workers that may wait for its data.
        self._waiting_for_data_of: dict[str, set[str]] = {}

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
                 expected_workers: int | None = None, retry_lost_tasks: bool = True) -> None:
        tuning.apply()
        check_versions_once_per_installation()
        self.coordinator = Coordinator(keep_serving, expected_workers)
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
        if not retry_lost_tasks:
            # A task whose worker died comes back to the client at once (KilledWorker),
            # which knows whether the task killed it (see deaths.py).
            self._options["allowed_failures"] = 0
        self._retry_lost_tasks = retry_lost_tasks
        self._scheduler: Scheduler | None = None
        self._background: list[asyncio.Task[None]] = []

    @property
    def address(self) -> str:
        assert self._scheduler is not None
        return self._scheduler.address

    async def start(self) -> SchedulerService:
        """Start the scheduler on the running event loop (Dask binds it to that loop)."""
        with warnings.catch_warnings():
            # A taken dashboard port is replaced by a free one; the client's
            # dashboard line gives the port in use, so Dask's warning is noise.
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            scheduler = _Scheduler(**self._options)
        if not self._retry_lost_tasks:
            # No queue on the scheduler: the client's batching engine already sends
            # no more than the workers can take.  Dask's queue also holds the
            # finished results a dead worker took with it, to compute them again,
            # and looks at it only when a task ends or a worker joins: when the
            # client waits for just those results, nothing ends, and they waited
            # until the next worker died (seen in 1 of 5 runs of crash_job.py).
            scheduler.WORKER_SATURATION = math.inf
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
