"""One process's part in a launch: negotiate a role, play it, end it.

::

    negotiate()  launcher plug-in -> Identity -> Role, AddressExchange
    start()      SCHEDULER  serve until the client is done, exit(status)
                 WORKER     find the scheduler, serve, exit(status)
                 CLIENT     find the scheduler, connect, return a TaskBridge
                 STANDALONE scheduler in a thread + local worker processes
    finish()     (client) tell everyone the status, close, clean up

Non-client ranks leave the process with the client's verdict so launchers
return promptly and report failure truthfully.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from .._errors import LauncherError, LaunchFinished, StartupTimeoutError
from .._support.config import Settings
from .._support.logs import configure_rank_logging, quiet_dask_logging
from .._support.loop import run_until_complete
from ..launchers import AddressExchange, Launcher, SchedulerInfo, detect_launcher, get_launcher
from .roles import Identity, Role, assign_role

__all__ = ["Plan", "Session", "negotiate"]

logger = logging.getLogger("hpcfutures")

#: Seconds to wait for an answer when probing a published scheduler address.
PROBE_TIMEOUT = 5.0
#: Seconds between checks, while a worker registers, that the launch still runs.
LAUNCH_OVER_POLL = 0.25
#: Probes in a row without an answer after which a joining worker gives up.
DEAD_AFTER_SILENT_PROBES = 3


@dataclasses.dataclass(frozen=True)
class Plan:
    """The outcome of negotiation: what this process will do, and why."""

    launcher: Launcher
    reason: str
    identity: Identity
    role: Role
    exchange: AddressExchange | None


def choose_launcher(settings: Settings, environ: Mapping[str, str]) -> tuple[Launcher, str]:
    """The launcher plug-in asked for, else the detected one; and why."""
    if settings.launcher:
        cls, reason = get_launcher(settings.launcher), f"launcher={settings.launcher!r} was asked for"
    else:
        cls, reason = detect_launcher(environ)
    return cls(settings, environ), reason


def negotiate(settings: Settings, environ: Mapping[str, str] | None = None) -> Plan:
    """Decide this process's launcher, identity and role; start nothing."""
    environ = os.environ if environ is None else environ
    launcher, reason = choose_launcher(settings, environ)
    identity = launcher.identity()
    role = assign_role(identity.rank, identity.size, settings.scheduler_in_client)
    exchange = None if role is Role.STANDALONE else launcher.address_exchange(identity)
    return Plan(launcher, reason, identity, role, exchange)


def bind_address(settings: Settings, identity: Identity) -> tuple[str | None, str | None]:
    """(host, interface) for the scheduler and workers: explicit, else loopback on one host."""
    if settings.host or settings.interface:
        return settings.host, settings.interface
    if identity.single_host:
        return "127.0.0.1", None
    return None, None


class Session:
    """Plays this process's role in the launch."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        self.role = Role.STANDALONE
        self.exit_status: int | None = None
        self._plan: Plan | None = None
        self._client_side: Any = None

    def start(self):
        """Play the role; returns a TaskBridge in the client process, else None."""
        plan = self._plan = negotiate(self.settings, self.environ)
        self.role = plan.role
        if plan.role in (Role.SCHEDULER, Role.WORKER):
            from .. import _dask  # noqa: F401  (configures Dask's logging on import)

            quiet_dask_logging(self.environ)
            configure_rank_logging(plan.identity.rank, plan.role.value,
                                   plan.identity.launch_id, self.environ,
                                   log_dir=self.settings.log_dir)
            status = self._serve(plan)
            return self._leave(plan, status)
        from .client_side import ClientSide

        self._client_side = ClientSide(self.settings, plan)
        return self._client_side.start()

    def finish(self, status: int) -> None:
        """On the client: end the launch with ``status`` for the other ranks."""
        if self._client_side is not None:
            self._client_side.finish(status)
            self._client_side = None

    # ------------------------------------------------------------ non-client
    def _serve(self, plan: Plan) -> int:
        from .. import _dask

        host, interface = bind_address(self.settings, plan.identity)
        timeout = plan.launcher.lookup_timeout(plan.identity)
        if plan.role is Role.SCHEDULER:
            plan.launcher.before_scheduler(plan.identity)
            coro = _serve_scheduler(_dask, self.settings, plan, host, interface, timeout)
        else:
            plan.launcher.before_worker(plan.identity)
            coro = _serve_worker(_dask, self.settings, plan, host, interface, timeout)
        try:
            return run_until_complete(coro)
        except LaunchFinished as done:
            logger.info("rank %d: %s; nothing to do", plan.identity.rank, done)
            return 0

    def _leave(self, plan: Plan, status: int) -> None:
        self.exit_status = status
        if not self.settings.exit_when_done:
            return None
        plan.launcher.before_exit(plan.identity, status)
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # Leave at once: the user's code after the `with` block belongs to the
        # client, and no stray non-daemon thread may keep this rank alive.
        os._exit(status)


def _stop_on_signals(callback) -> None:
    """Route SIGTERM/SIGINT to ``callback(signum)`` on the running loop."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, callback, signum)


def launch_credentials(settings: Settings) -> dict[str, str]:
    """Fresh TLS credentials for a new scheduler, or none when security is off."""
    if not settings.security:
        logger.warning("security=False: the scheduler accepts anyone who can reach its port")
        return {}
    from .._support.security import new_credentials

    return new_credentials()


async def start_scheduler(_dask, settings: Settings, plan: Plan, host, interface,
                          keep_serving: bool = False):
    """Start a scheduler with fresh credentials; return it and what to publish.

    ``keep_serving``: a launch without a client of its own (``hpcfutures serve``).
    """
    credentials = launch_credentials(settings)
    service = await _dask.SchedulerService(
        host=host, interface=interface, security=_dask.make_security(credentials),
        keep_serving=keep_serving, dashboard=settings.dashboard,
        dashboard_address=settings.dashboard_address).start()
    if settings.release_idle_after is not None:
        service.release_idle_workers(settings.release_idle_after, settings.min_workers)
    info = SchedulerInfo(address=service.address, launch_id=plan.identity.launch_id,
                         security=credentials, serving=keep_serving)
    return service, info


async def _serve_scheduler(_dask, settings: Settings, plan: Plan, host, interface,
                           timeout: float) -> int:
    service, info = await start_scheduler(_dask, settings, plan, host, interface)
    _stop_on_signals(lambda signum: service.coordinator.end(
        128 + signum, f"the scheduler received {signal.Signals(signum).name}"))
    try:
        plan.exchange.publish(info)
        logger.info("scheduler at %s (%s)", service.address, plan.exchange.description)
        return await service.serve(client_timeout=timeout)
    finally:
        await service.close()
        plan.exchange.finish(info)


async def _serve_worker(_dask, settings: Settings, plan: Plan, host, interface,
                        timeout: float) -> int:
    from .._remote.calls import set_location

    identity = plan.identity
    info = await find_scheduler(_dask, plan.exchange, timeout, may_be_late=True)
    if identity.gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = identity.gpus
    set_location(f"rank {identity.rank} ({identity.launcher}) on {socket.gethostname()}")
    stop = asyncio.Event()
    _stop_on_signals(lambda signum: stop.set())
    service = _dask.WorkerService(
        info.address,
        name=f"rank-{identity.rank}",
        nthreads=settings.threads_per_worker or identity.threads or 1,
        memory_limit=settings.memory_limit or identity.memory_limit,
        host=host,
        interface=interface,
        timeout=timeout,
        security=_dask.make_security(info.security),
    )
    security = _dask.make_security(info.security)

    async def answers() -> bool:
        return await _dask.probe(info.address, LAUNCH_OVER_POLL * 4, security)

    if not await _join_while_launch_lasts(service, plan.exchange, info, stop, answers):
        return 0
    status = await service.serve(stop)
    if status is None:
        return 143 if stop.is_set() else _dask.EXIT_FAILED
    return status


async def _join_while_launch_lasts(service, exchange: AddressExchange, info: SchedulerInfo,
                                   stop: asyncio.Event, answers) -> bool:
    """Register with the scheduler; False if the launch ended meanwhile.

    A worker that starts just as a short launch finishes (or a late job-array
    element) would otherwise retry a vanished scheduler until its deadline and
    then report a failure that did not happen.  A scheduler that died while
    this worker was joining (``answers()`` stays false) fails the join at once
    instead of after the deadline; where the launcher ends every rank when one
    dies (MPI), a silent scheduler has finished instead, and the worker leaves.
    """
    joining = asyncio.ensure_future(service.join())
    silent = 0
    while True:
        done, _ = await asyncio.wait([joining], timeout=LAUNCH_OVER_POLL)
        if done:
            break
        if stop.is_set() or exchange.is_finished(info):
            joining.cancel()
            await service.close("hpcfutures: the launch ended before this worker joined")
            return False
        silent = 0 if await answers() else silent + 1
        if silent >= DEAD_AFTER_SILENT_PROBES and exchange.silence_means_finished:
            joining.cancel()
            await service.close("hpcfutures: the launch ended before this worker joined")
            logger.info("the scheduler at %s no longer answers: the launch is over", info.address)
            return False
        if silent >= DEAD_AFTER_SILENT_PROBES:
            joining.cancel()
            await service.close("hpcfutures: the scheduler died before this worker joined")
            raise LauncherError(
                f"the scheduler at {info.address} stopped answering while this worker was "
                "joining it; it probably died: see the scheduler rank's output")
    try:
        joining.result()
    except Exception:
        if exchange.is_finished(info):
            return False
        raise
    return True


async def find_scheduler(_dask, exchange: AddressExchange, timeout: float, *,
                         may_be_late: bool = False) -> SchedulerInfo:
    """Look the scheduler up and make sure it answers; skip stale entries until the deadline.

    ``may_be_late``: a worker, which may start after the launch ended (the
    client never can); see :attr:`AddressExchange.silence_means_finished`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    stale = None
    silent = 0
    while True:
        if (may_be_late and silent >= DEAD_AFTER_SILENT_PROBES
                and exchange.silence_means_finished):
            # A rank that starts after the end under MPI: the one answer it can
            # get names a scheduler that has finished (see _join_while_launch_lasts).
            raise LaunchFinished(f"the scheduler at {stale.address} no longer answers: "
                                 "the launch is over")
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise StartupTimeoutError(
                f"the scheduler published at {stale.address} ({exchange.description}) never "
                f"answered within {timeout:g} s; it may have died: check the scheduler rank's output"
            )
        info = exchange.lookup(remaining, stale=stale)
        if await _dask.probe(info.address, min(PROBE_TIMEOUT, max(remaining, 0.1)),
                             _dask.make_security(info.security)):
            return info
        logger.info("no scheduler answers at %s; treating it as stale", info.address)
        silent = silent + 1 if stale is not None and stale.address == info.address else 1
        stale = info
