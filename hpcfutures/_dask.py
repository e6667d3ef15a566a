"""The Dask lifecycle: start and stop the scheduler, a worker, the client.

This is the only module that imports ``distributed``'s internals.  Everything
here is a coroutine; the session runs it either on a fresh event loop (the
scheduler and worker ranks) or on the client's loop thread.

How the end of a launch travels::

    client ── hpcfutures_finish(status) ──> scheduler (Coordinator plugin)
    scheduler ── {"op": hpcfutures-verdict} + {"op": close} ──> every worker
    scheduler closes; each rank exits with the client's status

If the client disappears without saying goodbye (killed, node lost), the
Coordinator sees its connection drop and ends the launch with a failure status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from distributed import Client, Scheduler, Security, Worker
from distributed.comm import CommClosedError, connect
from distributed.core import send_recv
from distributed.diagnostics.plugin import SchedulerPlugin

from . import _memory as memory
from ._logs import quiet_for_shutdown
from ._release import IdleRelease
from ._dashboard import dashboard_facts_here
from ._summary import UsageLedger, report_and_remove

__all__ = [
    "EXIT_FAILED",
    "make_security",
    "SchedulerService",
    "connect_client",
    "finish_client",
    "probe",
    "request_stop",
    "dashboard_facts",
    "start_usage",
    "usage_report",
    "WorkerService",
    "run_worker",
    "wait_for_workers",
]

logger = logging.getLogger("hpcfutures")

VERDICT_OP = "hpcfutures-verdict"
#: Event topic on which the scheduler announces the workers and threads present.
CLUSTER_TOPIC = "hpcfutures-cluster"
#: Asks the scheduler for the workers it retired as idle (see _release.py).
RELEASED_OP = "hpcfutures_released"
#: Where the dashboard listens when asked for without an address.
DASHBOARD_ADDRESS = "127.0.0.1:8787"
#: Exit status of the other ranks when the client failed or vanished.
EXIT_FAILED = 1
#: Seconds a worker may take to close before its rank leaves regardless.
CLOSE_TIMEOUT = 5.0
#: Seconds Dask's batched streams gather messages before sending.  Dask's
#: defaults (10 ms client->scheduler, 5 ms scheduler->worker) add ~10 ms to
#: every round trip; hpcfutures batches tasks itself, so it can send sooner.
STREAM_INTERVAL = 0.001


def _hurry(stream: Any) -> None:
    """Shorten a Dask BatchedSend's batching interval (best effort)."""
    if stream is not None and hasattr(stream, "interval"):
        stream.interval = STREAM_INTERVAL


def _announce_cluster(scheduler: Scheduler, leaving: str | None = None) -> None:
    """Tell the clients how many workers and threads there are now (see follow_cluster)."""
    present = [ws for address, ws in scheduler.workers.items() if address != leaving]
    scheduler.log_event(CLUSTER_TOPIC, {"workers": len(present),
                                        "threads": sum(ws.nthreads for ws in present)})


async def follow_cluster(client: Client, changed: Callable[[int, int], None]) -> None:
    """Call ``changed(workers, threads)`` now and whenever a worker joins or leaves.

    The client's own scheduler info is refreshed only every two seconds, so a
    ``map`` started just after the launch would size its chunks for the
    workers present at start-up (typically one of many).
    """
    client.subscribe_topic(CLUSTER_TOPIC, lambda event: changed(**event[1]))
    cores = await client.scheduler.ncores()
    changed(workers=len(cores), threads=sum(cores.values()))


def make_security(credentials: Mapping[str, str] | None) -> Security | None:
    """Dask's TLS settings from a launch's credentials; None means plain TCP."""
    if not credentials:
        return None
    cert, key = credentials["cert"], credentials["key"]
    return Security(
        require_encryption=True,
        tls_ca_file=cert,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


class Coordinator(SchedulerPlugin):
    """Scheduler plug-in that knows when the launch is over, and how it ended.

    With ``keep_serving`` (``hpcfutures serve``) the launch has no client of
    its own: clients from outside come and go, and none of them ends it; a stop
    request (``hpcfutures_stop``), a signal or the idle timeout does.
    """

    name = "hpcfutures-coordinator"

    def __init__(self, keep_serving: bool = False) -> None:
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

    async def start(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        scheduler.handlers["hpcfutures_register"] = self._register
        scheduler.handlers["hpcfutures_finish"] = self._finish
        scheduler.handlers[RELEASED_OP] = lambda: []  # until idle release is on
        if self.keep_serving:
            scheduler.handlers["hpcfutures_stop"] = self._stop

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
        _hurry(scheduler.stream_comms.get(worker))
        _announce_cluster(scheduler)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        _announce_cluster(scheduler, leaving=worker)

    def _finish(self, status: int) -> str:
        # The launch ends when the client disconnects right after this call:
        # by then the scheduler has released the client's keys, so closing the
        # workers loses nothing anyone still wants.
        self.requested = int(status)
        return "ok"

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
        else:
            self.end(self.requested, f"the client failed (exit status {self.requested})")

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


class SchedulerService:
    """A Dask scheduler in this process, with the coordinator attached."""

    def __init__(self, *, host: str | None, interface: str | None,
                 security: Any = None, http_address: str = "127.0.0.1:0",
                 keep_serving: bool = False, dashboard: bool = False,
                 dashboard_address: str | None = None) -> None:
        self.coordinator = Coordinator(keep_serving)
        self._options = dict(
            host=host,
            interface=interface,
            protocol="tls" if security is not None else None,
            port=0,
            # Without bokeh Dask serves a page saying so; the client warns.
            dashboard=dashboard,
            # Dask always serves some HTTP routes (health, metrics); keep them
            # on loopback and off the fixed port 8787 that another launch may hold.
            dashboard_address=(dashboard_address or DASHBOARD_ADDRESS) if dashboard
            else http_address,
            plugins=[self.coordinator],
            security=security,
            validate=False,
        )
        self._scheduler: Scheduler | None = None
        self._background: list[asyncio.Task] = []

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
            scheduler = Scheduler(**self._options)
        self._scheduler = await scheduler
        return self

    def release_idle_workers(self, idle_after: float, keep: int) -> IdleRelease:
        """Retire workers idle for ``idle_after`` s (see :mod:`._release`) from now on."""
        assert self._scheduler is not None
        scheduler = self._scheduler

        def say_goodbye(address: str) -> None:
            # The worker's rank exits with this status: done, not failed.
            scheduler.worker_send(address, {"op": VERDICT_OP, "status": 0})

        release = IdleRelease(scheduler, idle_after, keep, say_goodbye,
                              started=self.coordinator.client_seen.is_set)
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


class WorkerService:
    """A Dask worker in this process: :meth:`join` the scheduler, then :meth:`serve`."""

    def __init__(self, address: str, *, name: str, nthreads: int,
                 memory_limit: str | int | None, host: str | None,
                 interface: str | None, timeout: float, security: Any = None,
                 resources: dict[str, float] | None = None) -> None:
        self.name, self.address = name, address
        self.verdict: int | None = None
        self._closed = asyncio.Event()
        self._worker = Worker(
            address,
            name=name,
            nthreads=nthreads,
            memory_limit=memory_limit or 0,
            host=host,
            interface=interface,
            dashboard=False,
            death_timeout=timeout,
            security=security,
            protocol="tls" if security is not None else None,
            resources=resources,
            validate=False,
        )
        self._worker.stream_handlers[VERDICT_OP] = self._record_verdict
        self._worker.stream_handlers["close"] = self.close
        self._worker.handlers["close"] = self.close

    def _record_verdict(self, status: int) -> None:
        if self.verdict is None:
            self.verdict = status
        quiet_for_shutdown()

    async def join(self) -> None:
        """Start the worker and register with the scheduler (raises if that fails)."""
        await self._worker
        _hurry(self._worker.batched_stream)
        # Dask has parsed the limit ("4GiB", "auto", a fraction) into bytes.
        memory.enforce(self._worker.memory_manager.memory_limit)

    async def close(self, reason: str = "scheduler-close", **_: Any) -> None:
        """Close now, without waiting for running tasks.

        Dask's default close waits for them; once the launch is over nobody
        wants their results, and a week-long task must not keep the rank (and
        the allocation) alive.  Bounded: the rank leaves even if closing sticks.
        """
        try:
            await asyncio.wait_for(
                self._worker.close(reason=reason, executor_wait=False), CLOSE_TIMEOUT)
        except (asyncio.TimeoutError, Exception):
            logger.debug("worker %s did not close cleanly", self.name, exc_info=True)
        finally:
            self._closed.set()

    async def serve(self, stop: asyncio.Event | None = None) -> int | None:
        """Serve until the scheduler closes this worker (or ``stop`` is set).

        Returns the client's verdict as passed on by the scheduler, or None if
        the worker ended without one (the scheduler vanished, or a signal).
        """
        waits = [asyncio.ensure_future(self._worker.finished()),
                 asyncio.ensure_future(self._closed.wait()),
                 asyncio.ensure_future(self._closing_for_too_long())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        if stop is not None and stop.is_set():
            await self.close("hpcfutures: stopped by a signal")
        return self.verdict


    async def _closing_for_too_long(self, poll: float = 0.5) -> None:
        """Return once Dask's worker has been closing for CLOSE_TIMEOUT s.

        When the scheduler's connection breaks before its close message
        arrives, Dask closes the worker itself, and that close can sit on
        retries to the vanished scheduler for its own 30 s timeout (seen under
        mpiexec on a loaded machine, where MPI_Finalize then waits for this
        rank).  The rank must not wait on it longer than on any other close.
        """
        closing_since = None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(poll)
            if self._worker.status.name not in ("stopping", "stopped", "closing",
                                                "closing_gracefully", "closed", "failed"):
                closing_since = None
                continue
            closing_since = closing_since or loop.time()
            if loop.time() - closing_since >= CLOSE_TIMEOUT:
                logger.debug("worker %s still closing after %g s; leaving anyway",
                             self.name, CLOSE_TIMEOUT)
                return


async def run_worker(address: str, *, stop: asyncio.Event | None = None,
                     **options: Any) -> int | None:
    """Join the scheduler at ``address`` and serve; None if it could not join."""
    service = WorkerService(address, **options)
    try:
        await service.join()
    except Exception:
        logger.debug("worker %s could not join %s", service.name, address, exc_info=True)
        return None
    return await service.serve(stop)


async def probe(address: str, timeout: float, security: Any = None) -> bool:
    """Whether anything answers at ``address`` (tells a live scheduler from a stale file)."""
    args = security.get_connection_args("client") if security is not None else {}
    try:
        comm = await connect(address, timeout=timeout, **args)
    except (OSError, asyncio.TimeoutError):
        return False
    await comm.close()
    return True


async def request_stop(address: str, timeout: float, security: Any = None,
                       reason: str = "") -> bool:
    """Ask a serving launch's scheduler to end the launch; whether it accepted.

    The scheduler may close the connection before its answer arrives (it is
    stopping); that counts as accepted, and the caller confirms the stop
    through the scheduler file.
    """
    args = security.get_connection_args("client") if security is not None else {}
    comm = await connect(address, timeout=timeout, **args)
    try:
        reply = await asyncio.wait_for(
            send_recv(comm, op="hpcfutures_stop", reason=reason), timeout)
    except CommClosedError:
        return True
    finally:
        with contextlib.suppress(Exception):
            await comm.close()
    return reply == "ok"


async def connect_client(address: str, timeout: float, security: Any = None) -> Client:
    """An asynchronous Dask client, registered with the coordinator as *the* client."""
    # A large argument travels inside its call, as with any executor; Dask's
    # advice to scatter it or load it with Dask is not the user's to act on.
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning,
                            module="distributed.client")
    client = await Client(
        address,
        asynchronous=True,
        timeout=timeout,
        set_as_default=False,
        security=security,
        # Results come straight from the worker that holds them, not
        # through the scheduler (a 40 MiB result crosses the network once).
        direct_to_workers=True,
    )
    await client.scheduler.hpcfutures_register(client=client.id)
    _hurry(client.scheduler_comm)
    return client


async def wait_for_workers(client: Client, timeout: float) -> None:
    """Wait until at least one worker has joined, at most ``timeout`` s."""
    await client.wait_for_workers(1, timeout=timeout)


class UsagePlugin(UsageLedger, SchedulerPlugin):
    """The end-of-run summary's ledger (see ``_summary.py``) as a scheduler plug-in."""


async def start_usage(client: Client) -> str:
    """Start counting this client's work on the scheduler; return the ledger's name.

    The client installs the ledger itself (only when ``summary`` is on), so the
    scheduler pays nothing otherwise, and each client gets a ledger of its own.
    """
    name = f"hpcfutures-usage-{client.id}"
    await client.register_plugin(UsagePlugin(), name=name)
    return name


async def usage_report(client: Client, name: str) -> dict[str, Any] | None:
    """The ledger's report (and the ledger removed), None if it is gone."""
    return await client.run_on_scheduler(report_and_remove, name)


async def dashboard_facts(client: Client) -> dict[str, Any]:
    """Where the scheduler's dashboard listens, asked of the scheduler (which may
    be another rank on another host); see :func:`._dashboard.dashboard_facts_here`."""
    return await client.run_on_scheduler(dashboard_facts_here)


async def finish_client(client: Client, status: int, timeout: float = 5.0) -> None:
    """Tell the scheduler the launch is over, then close the client.

    If the scheduler is already gone (it was signalled too, or died) there is
    nobody to tell: close at once instead of waiting for a reconnection, and
    keep Dask's complaints about the lost connection out of the user's output.
    """
    with _silenced("distributed.client", "distributed.comm", "distributed.core"):
        if client.status == "running":
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.scheduler.hpcfutures_finish(status=status), timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout)


@contextlib.contextmanager
def _silenced(*names: str):
    loggers = [logging.getLogger(name) for name in names]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
