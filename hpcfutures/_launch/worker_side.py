"""A worker rank's part: find the scheduler, join it while the launch lasts, serve."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType

from .._errors import LauncherError
from .._remote.gpus import install as install_gpus
from .._support import environment
from .._support.config import Settings
from .._support.gpus import GpuShare, local_size, node_ranks, share_of, worker_slot
from .._support.loop import stop_on_signals
from .._support.patience import Patience, jittered
from ..launchers import AddressExchange, SchedulerInfo
from ..launchers._identity import Identity, client_rank
from .lookup import DEAD_AFTER_REFUSALS, find_scheduler
from .plan import Plan, mark_worker_process

__all__ = ["join_and_serve", "play_worker"]

logger = logging.getLogger("hpcfutures")


async def play_worker(_dask: ModuleType, settings: Settings, plan: Plan, host, interface,
                        timeout: float, first_worker: int | None = None) -> int:
    """A worker rank, one to a process: what :func:`join_and_serve` does, plus what
    belongs to the process (its GPUs, its signals, the mark that it is a worker).
    ``first_worker``: the launch's first worker rank (default: after the scheduler and
    the client; a serving launch's is 1)."""
    from .._remote.calls import set_location

    identity = plan.identity
    patience = Patience.for_launch(identity.size, timeout)
    info = await find_scheduler(_dask, plan.peers_exchange, timeout, may_be_late=True,
                                patience=patience, spread=True, rank=identity.rank)
    share = gpus_of_worker(settings, identity, os.environ, first_worker)
    install_gpus(share.ids, share.variables, own=share.own)
    set_location(f"rank {identity.rank} ({identity.launcher}) on {socket.gethostname()}")
    mark_worker_process(f"rank {identity.rank} (worker) of launch {identity.launch_id} on "
                        f"{socket.gethostname()}")
    stop = asyncio.Event()
    stop_on_signals(lambda signum: stop.set())
    on_host = worker_slot_of(settings, identity, os.environ, first_worker)[1] or 1
    return await join_and_serve(_dask, settings, plan, info, host, interface, timeout, stop,
                                watch=True, gpus=share.count, workers_on_host=on_host)


def gpus_of_worker(settings: Settings, identity: Identity, environ: Mapping[str, str],
                   first_worker: int | None = None) -> GpuShare:
    """This worker rank's GPUs: its share of those its node's environment names."""
    index, count = worker_slot_of(settings, identity, environ, first_worker)
    return share_of(environ, index, count)


def worker_slot_of(settings: Settings, identity: Identity, environ: Mapping[str, str],
                   first_worker: int | None = None) -> tuple[int | None, int | None]:
    """This worker's place among its node's worker ranks (see ``_support/gpus.py``)."""
    if identity.size == 1:  # a process of a job that joins another launch: by node rank
        from ..launchers.mpi import local_rank

        return local_rank(environ), local_size(environ)
    if first_worker is None:
        first_worker = client_rank(settings.scheduler_in_client) + 1
    return worker_slot(identity.rank, identity.size, first_worker, identity.local_rank,
                       local_size(environ), node_ranks(environ, identity.launcher),
                       identity.single_host)


async def join_and_serve(_dask: ModuleType, settings: Settings, plan: Plan, info: SchedulerInfo,
                         host, interface, timeout: float, stop: asyncio.Event, *,
                         watch: bool, gpus: int = 0, workers_on_host: int = 1) -> int:
    """Join the scheduler found at ``info`` while the launch lasts, serve until its
    end; the rank's exit status.

    Everything a worker rank does once it knows where the scheduler is, and
    nothing that belongs to its process: the scale harness
    (``benchmarks/scale.py``) runs it for hundreds of ranks in one process.
    ``watch``: start the watcher process that reports this process's death.
    """
    identity = plan.identity
    patience = Patience.for_launch(identity.size, timeout)
    security = _dask.make_security(info.security)
    _dask.patient_connects(30.0 + 3 * patience.herd)

    async def answers() -> bool | None:
        """True: the scheduler answers; None: nobody listens there any more.  (Its
        TLS answered the probe already: whether the port still listens is enough.)"""
        knock = await _dask.listening(info.address, patience.knock_timeout)
        return None if knock is _dask.Knock.REFUSED else knock is _dask.Knock.ANSWERED

    try:
        # A worker on another Python or package versions than its scheduler would
        # fail calls mid-map: it does not join, and the client hears why.
        environment.check(f"rank {identity.rank} (worker) on {socket.gethostname()}",
                          info.versions, f"the scheduler of launch {info.launch_id} on {info.host}")
        service = _dask.WorkerService(
            info.address,
            name=plan.worker_name or f"rank-{identity.rank}",
            nthreads=settings.threads_per_worker or identity.threads or 1,
            memory_limit=settings.memory_limit or identity.memory_limit,
            host=host,
            interface=interface,
            # Dask's death_timeout: the join must be done by then.  A large
            # launch's joins queue at its one scheduler.
            timeout=timeout + patience.herd,
            security=security,
            watch=watch,
            report_timeout=patience.report_timeout,
            gpus=gpus,
            workers_on_host=workers_on_host,
        )
        joined = await _join_while_launch_lasts(service, plan.peers_exchange, info, stop,
                                                answers, patience.knock_every)
    except Exception as err:
        # A setting only a worker can reject (an interface or address this host
        # lacks, a Dask worker option): the scheduler passes the reason on.
        who = f"rank {identity.rank} (worker) on {socket.gethostname()}"
        await _dask.report_startup_failure(info.address, who, _dask.startup_error(err),
                                           patience.report_timeout, security)
        raise
    if not joined:
        return 0
    plan.launcher.worker_joined(identity)
    status = await service.serve(stop)
    if status is None and not stop.is_set() and await _launch_ended(
            plan.peers_exchange, info, answers, patience.farewell):
        # The scheduler closed as the launch ended, before this worker heard the
        # verdict: a worker that joined as the client finished (common when many
        # ranks share few cores) is done, not failed.
        logger.info("rank %d (worker): the launch ended as this worker joined", identity.rank)
        return 0
    if status is None and not stop.is_set():
        logger.warning("rank %d (worker) lost the scheduler at %s before the launch ended (it "
                       "died, this node lost the network, or this worker was silent for too "
                       "long and was dropped): leaving with exit status %d",
                       identity.rank, info.address, _dask.EXIT_FAILED)
    if status is None:
        return 143 if stop.is_set() else _dask.EXIT_FAILED
    return status


async def _launch_ended(exchange: AddressExchange, info: SchedulerInfo,
                        answers: Callable[[], Awaitable[bool | None]], patience: float,
                        every: float = 0.25) -> bool:
    """Whether a scheduler this worker lost without a verdict closed because the launch ended.

    The scheduler marks the exchange finished only after its close, so the mark
    can come a moment after the connection broke: look for up to ``patience``
    s.  Where the launcher ends every rank when one dies (MPI), a scheduler
    whose port no longer listens has finished.  A scheduler that still listens
    dropped this worker; one that vanished without a mark died: both are failures.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        if exchange.is_finished(info):
            return True
        if exchange.silence_means_finished:
            answer = await answers()
            if answer is None:
                return True
            if answer:
                return False
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(min(jittered(every), max(deadline - loop.time(), 0.0)))


#: Seconds between looks, while a worker registers, at whether it joined or was stopped.
JOIN_POLL = 0.25


async def _join_while_launch_lasts(service, exchange: AddressExchange, info: SchedulerInfo,
                                   stop: asyncio.Event,
                                   answers: Callable[[], Awaitable[bool | None]],
                                   check_every: float = JOIN_POLL) -> bool:
    """Register with the scheduler; False if the launch ended meanwhile.

    A worker that starts just as a short launch finishes (or a late job-array
    element) would otherwise retry a vanished scheduler until its deadline and
    then report a failure that did not happen.  A scheduler that died while
    this worker was joining (nobody listens at its address any more) fails the
    join at once instead of after the deadline; where the launcher ends every
    rank when one dies (MPI), a closed scheduler has finished instead, and the
    worker leaves.  Silence is neither: a scheduler busy with a thousand other
    joins answers late, and the join itself has its deadline (``timeout``).

    Whether the launch still runs is checked every ``check_every`` s (with
    jitter): each check reads the scheduler file and knocks at the
    scheduler's port, and a large launch has many workers joining at once.
    """
    joining = asyncio.ensure_future(service.join())
    loop = asyncio.get_running_loop()
    refusals = 0
    next_check = loop.time() + jittered(check_every)
    while True:
        done, _ = await asyncio.wait([joining], timeout=min(JOIN_POLL, check_every))
        if done:
            break
        if stop.is_set():
            joining.cancel()
            await service.close("hpcfutures: the launch ended before this worker joined")
            return False
        if loop.time() < next_check:
            continue
        next_check = loop.time() + jittered(check_every)
        if exchange.is_finished(info):
            joining.cancel()
            await service.close("hpcfutures: the launch ended before this worker joined")
            return False
        answer = await answers()
        refusals = refusals + 1 if answer is None else 0
        if answer is None and exchange.silence_means_finished:
            joining.cancel()
            await service.close("hpcfutures: the launch ended before this worker joined")
            logger.info("the scheduler at %s no longer answers: the launch is over", info.address)
            return False
        if refusals >= DEAD_AFTER_REFUSALS:
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
