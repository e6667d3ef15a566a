"""The Coordinator: the scheduler plug-in that knows who is there and when the launch ends.

It registers the launch's client, counts the workers that join, leave or fail
to start (and announces the cluster's size to the client), keeps the register
of dead workers (deaths.py) and of MPI groups (mpigroups.py), and decides the
launch's end: the client's goodbye, its lost connection, a stop, or no worker
left that could ever come.  scheduler.py runs it inside Dask's scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin

from .._support.logs import quiet_for_shutdown
from .._support.waves import WaveLog
from ._common import (
    AWAIT_WORKERS_OP,
    CLUSTER_TOPIC,
    EXIT_FAILED,
    FINISH_OP,
    RELEASED_OP,
    STARTUP_FAILED_OP,
    STARTUP_TOPIC,
    VERDICT_OP,
    WORKER_TOPIC,
    _hurry,
)
from .cluster import WorkerChanges
from .deaths import AWAIT_DEATH_OP, Deaths
from .mpigroups import MEMBER_ENDS, RankGroups
from .stranded import Stranded

__all__ = ["ClusterSize", "Coordinator"]

logger = logging.getLogger("hpcfutures")


class ClusterSize:
    """How many workers and threads the launch has now, told to the clients.

    The client sizes its maps from this (see ``follow_cluster``).  Counting
    ``scheduler.workers`` on every join and leave would make a ramp of W ranks
    O(W²) on the scheduler's loop (seconds of it at 10,000 ranks): here the
    totals are running sums kept on each join and leave, with each worker's
    threads remembered from its join (a leaving worker is counted out
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
        #: Workers that left since the last announcement (the client drops its
        #: connections to them: see ``follow_cluster``).
        self._left: list[str] = []

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
        self._left.append(worker)
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
        left, self._left = self._left, []
        if self._scheduler is not None:
            self._scheduler.log_event(CLUSTER_TOPIC, {"workers": self.workers,
                                                      "threads": self.threads, "left": left})


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
        self._scratch_log = WaveLog(
            logger, "worker was slow to create its scratch directory",
            "workers were slow to create their scratch directories",
            advice="many workers starting at once on one node queue on its lock files, or "
                   "it is on a network file system: DASK_TEMPORARY_DIRECTORY=<a local disk> "
                   "moves it")
        #: Dead workers' certificates, and whether any worker is left (deaths.py).
        self.deaths = Deaths()
        #: Workers reserved for MPI tasks (mpigroups.py).
        self.groups = RankGroups()
        #: Joins and departures, for the client's roster (cluster.py).
        self.worker_changes = WorkerChanges()
        #: Calls with needs that no worker left can meet (stranded.py).
        self.stranded = Stranded(lambda: self.deaths.capacity is not None
                                 and self.joined >= self.deaths.capacity)
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
        self.stranded.install(scheduler)
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

    def log_event(self, topic: str, msg: Any) -> None:
        """An event logged on the scheduler: a worker describing itself as it joins
        (``WORKER_TOPIC``, sent by ``_dask/worker.py``), the only one heard here."""
        if topic != WORKER_TOPIC or not isinstance(msg, dict):
            return
        address, name, host = msg.get("worker"), msg.get("name"), msg.get("host")
        if not isinstance(address, str) or not isinstance(name, str):
            return
        if isinstance(host, str) and host:
            self.worker_changes.described(address, name, host)
        said = msg.get("scratch")
        if isinstance(said, dict):
            self._tell_of_slow_scratch(name, host if isinstance(host, str) else "", said)

    def _tell_of_slow_scratch(self, name: str, host: str, said: dict[str, Any]) -> None:
        """A worker whose scratch directory took over a second to create (Dask warns of it
        in every such worker: dozens of lines when 150 start on one node): one line, and
        a summary line for a wave of them."""
        where = str(said.get("directory"))
        on = f" on {host}" if host else ""
        self._scratch_log.add(
            f"{name}{on} took {float(said.get('seconds', 0)):.1f} s "
            f"to create its scratch directory in {where}",
            f"in {where}{on}")

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        # Dask may call this before or after it drops the worker from
        # scheduler.workers: neither count here looks there.
        if self.verdict is None:
            self.deaths.departed_worker(worker)
            self.groups.worker_left(worker)
        self.size.left(scheduler, worker)
        self.worker_changes.left(worker)
        self.groups.worker_gone(worker)
        self.stranded.look_soon()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish in MEMBER_ENDS:  # an MPI task's member may free its group
            self.groups.member_ended(key)
        elif finish == "no-worker":  # a call whose needs may fit no worker left
            self.stranded.look_soon()

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
