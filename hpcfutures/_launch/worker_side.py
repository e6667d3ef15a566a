"""A worker rank's part: find the scheduler, join it while the launch lasts, serve."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from types import ModuleType

from .._errors import LauncherError
from .._support.config import Settings
from .._support.loop import stop_on_signals
from ..launchers import AddressExchange, SchedulerInfo
from .lookup import DEAD_AFTER_SILENT_PROBES, find_scheduler
from .plan import Plan, mark_worker_process

__all__ = ["play_worker"]

logger = logging.getLogger("hpcfutures")


#: Seconds between checks, while a worker registers, that the launch still runs.
LAUNCH_OVER_POLL = 0.25
#: Seconds a worker that could not start spends telling the scheduler why.
REPORT_TIMEOUT = 5.0


async def play_worker(_dask: ModuleType, settings: Settings, plan: Plan, host, interface,
                        timeout: float) -> int:
    from .._remote.calls import set_location

    identity = plan.identity
    info = await find_scheduler(_dask, plan.peers_exchange, timeout, may_be_late=True)
    if identity.gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = identity.gpus
    set_location(f"rank {identity.rank} ({identity.launcher}) on {socket.gethostname()}")
    mark_worker_process(f"rank {identity.rank} (worker) of launch {identity.launch_id} on "
                        f"{socket.gethostname()}")
    stop = asyncio.Event()
    stop_on_signals(lambda signum: stop.set())
    security = _dask.make_security(info.security)

    async def answers() -> bool | None:
        """True: the scheduler answers; None: nobody listens there any more."""
        knock = await _dask.knock(info.address, LAUNCH_OVER_POLL * 4, security)
        return None if knock is _dask.Knock.REFUSED else knock is _dask.Knock.ANSWERED

    try:
        service = _dask.WorkerService(
            info.address,
            name=plan.worker_name or f"rank-{identity.rank}",
            nthreads=settings.threads_per_worker or identity.threads or 1,
            memory_limit=settings.memory_limit or identity.memory_limit,
            host=host,
            interface=interface,
            timeout=timeout,
            security=security,
            watch=True,
        )
        joined = await _join_while_launch_lasts(service, plan.peers_exchange, info, stop,
                                                answers)
    except Exception as err:
        # A setting only a worker can reject (an interface or address this host
        # lacks, a Dask worker option): the scheduler passes the reason on.
        who = f"rank {identity.rank} (worker) on {socket.gethostname()}"
        await _dask.report_startup_failure(info.address, who, _dask.startup_error(err),
                                           REPORT_TIMEOUT, security)
        raise
    if not joined:
        return 0
    status = await service.serve(stop)
    if status is None and not stop.is_set():
        logger.warning("rank %d (worker) lost the scheduler at %s before the launch ended (it "
                       "died, this node lost the network, or this worker was silent for too "
                       "long and was dropped): leaving with exit status %d",
                       identity.rank, info.address, _dask.EXIT_FAILED)
    if status is None:
        return 143 if stop.is_set() else _dask.EXIT_FAILED
    return status


async def _join_while_launch_lasts(service, exchange: AddressExchange, info: SchedulerInfo,
                                   stop: asyncio.Event,
                                   answers: Callable[[], Awaitable[bool | None]]) -> bool:
    """Register with the scheduler; False if the launch ended meanwhile.

    A worker that starts just as a short launch finishes (or a late job-array
    element) would otherwise retry a vanished scheduler until its deadline and
    then report a failure that did not happen.  A scheduler that died while
    this worker was joining (``answers()`` stays false) fails the join at once
    instead of after the deadline; where the launcher ends every rank when one
    dies (MPI), a silent scheduler has finished instead, and the worker leaves,
    at the first refusal (nobody listens there any more: it has closed).
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
        answer = await answers()
        silent = 0 if answer else silent + 1
        if answer is None and exchange.silence_means_finished:
            silent = DEAD_AFTER_SILENT_PROBES
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

