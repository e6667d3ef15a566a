"""Serving mode: every process of a launch serves, and clients connect from outside.

::

    srun -n4 hpcfutures serve --scheduler-file ~/hpcfutures-{job_id}.json
     ├─ [0] scheduler ── writes the file (0600: address, TLS credentials, serving)
     ├─ [1] worker   ─┐
     ├─ [2] worker    ├─ serve until the launch stops
     └─ [3] worker   ─┘
    a notebook, the login node ── hpcfutures.connect(file) ── submit/map ── leave
    hpcfutures stop FILE ── the scheduler ends the launch ── every rank exits 0

No rank runs user code, so no rank is the client: the scheduler does not end
the launch when a client leaves, only on a stop request, on SIGTERM or SIGINT
(scancel, the time limit, Ctrl-C) or after an idle timeout.  Each of those is
the expected end of a serving launch, so every rank then exits 0.  The file
then becomes a "stopped" marker, so a late ``connect`` says what happened.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from .._errors import ConfigurationError, HPCFuturesError, LaunchFinished
from .._support.config import Settings
from .._support.limits import raise_open_files_limit
from .._support.logs import configure_rank_logging, quiet_dask_logging
from .._support.loop import run_until_complete, stop_on_signals
from ..launchers import AddressExchange, SchedulerInfo
from ..launchers._identity import Identity
from ..launchers._schedfile import SchedulerFileExchange
from .local_workers import join_options
from .plan import Plan, bind_address, choose_launcher
from .roles import Role, assign_serving_role
from .scheduler_side import start_scheduler
from .worker_side import play_worker

__all__ = ["join", "serve", "serving_plan"]

#: Where a job's id is found, for the names of workers that join from another job.
_JOB_ID_VARS = ("SLURM_JOB_ID", "JOB_ID", "PBS_JOBID", "LSB_JOBID")

#: Worker exit statuses that only mean "a signal stopped me" (SIGINT, SIGTERM).
_SIGNALLED = {128 + signal.SIGINT, 128 + signal.SIGTERM}


class _AlsoToFile(AddressExchange):
    """The launch's own exchange (an MPI broadcast), plus the file outsiders read."""

    def __init__(self, inner: AddressExchange, public: SchedulerFileExchange) -> None:
        self.inner, self.public = inner, public
        self.description = f"{inner.description}, and {public.description} for clients"
        # What the launch's own exchange says of its launcher holds for the pair.
        self.silence_means_finished = inner.silence_means_finished
        self.direct_to_workers = inner.direct_to_workers

    def publish(self, info: SchedulerInfo) -> None:
        self.inner.publish(info)
        self.public.publish(info)

    def lookup(self, timeout: float, stale: SchedulerInfo | None = None) -> SchedulerInfo:
        return self.inner.lookup(timeout, stale)

    async def lookup_async(self, timeout: float,
                           stale: SchedulerInfo | None = None) -> SchedulerInfo:
        return await self.inner.lookup_async(timeout, stale)

    def finish(self, info: SchedulerInfo) -> None:
        self.public.finish(info)
        self.inner.finish(info)

    def is_finished(self, info: SchedulerInfo) -> bool:
        """Over when either says so: the stopped marker the scheduler writes to the
        file on its way out counts (an MPI broadcast has no way to say it)."""
        return self.inner.is_finished(info) or self.public.is_finished(info)


def serving_plan(settings: Settings, environ: Mapping[str, str]) -> Plan:
    """This process's part in a serving launch; raises if the file cannot be named."""
    if not settings.scheduler_file:
        raise ConfigurationError(
            "a serving launch needs a scheduler file that clients outside the job can find: "
            "pass --scheduler-file PATH (or set HPCFUTURES_SCHEDULER_FILE) with a path you can "
            "name from outside, on a filesystem both see, e.g. ~/hpcfutures-{job_id}.json")
    launcher, reason = choose_launcher(settings, environ)
    identity = launcher.identity()
    role = assign_serving_role(identity.rank, identity.size)
    # A tombstone at the end, even where the launcher would delete its file:
    # a client that comes late is told the launch stopped, not "no such file".
    public = SchedulerFileExchange.for_launch(settings, identity, tombstone=True)
    exchange: AddressExchange = public
    if role is not Role.STANDALONE:
        inner = launcher.address_exchange(identity)
        if isinstance(inner, SchedulerFileExchange) and inner.path == public.path:
            inner.tombstone = True
            exchange = inner
        else:
            exchange = _AlsoToFile(inner, public)
    return Plan(launcher, reason, identity, role, exchange)


def serve(settings: Settings, *, idle_timeout: float | None = None,
          environ: Mapping[str, str] | None = None) -> int:
    """Play this process's part in a serving launch until it stops; return the exit status."""
    environ = os.environ if environ is None else environ
    plan = serving_plan(settings, environ)
    from .. import _dask

    quiet_dask_logging(environ)
    configure_rank_logging(plan.identity.rank, plan.role.value, plan.identity.launch_id,
                           environ, log_dir=settings.log_dir)
    # Not through Session.start: the same raise, and the same warning on the scheduler.
    raise_open_files_limit(plan.identity.size, scheduler=plan.role is not Role.WORKER)
    # Never loopback unless asked: clients come from other hosts (the login node), and
    # must reach the scheduler and, for results, the workers. TLS keeps strangers out.
    host, interface = bind_address(settings, plan.identity, serving=True)
    try:
        if plan.role is Role.WORKER:
            plan.launcher.before_worker(plan.identity)
            timeout = plan.launcher.lookup_timeout(plan.identity)
            try:
                status = run_until_complete(  # every rank after the scheduler is a worker
                    play_worker(_dask, settings, plan, host, interface, timeout, first_worker=1))
            except LaunchFinished:
                status = 0
            status = 0 if status in _SIGNALLED else status
        else:
            plan.launcher.before_scheduler(plan.identity)
            status = _serving_scheduler_rank(_dask, settings, plan, host, interface,
                                             idle_timeout)
    except HPCFuturesError as err:
        # Said here, as ``hpcfutures serve`` says any error, because the launcher's
        # way out may not return: under MPI this rank must still meet the others at
        # the end (or abort the job), where leaving through the exception would wait
        # in MPI_Finalize for ranks that wait for it.
        print(f"hpcfutures serve: {err}", file=sys.stderr, flush=True)
        status = 2 if isinstance(err, ValueError) else 1
    plan.launcher.before_exit(plan.identity, status)
    return status


def join(settings: Settings, path: Path, environ: Mapping[str, str] | None = None) -> int:
    """Serve as a worker of the serving launch behind ``path``, from another job.

    ``hpcfutures serve --join FILE``: the worker jobs ``AllocatedExecutor.scale``
    adds.  Every process of this job is a worker; each is named after its own
    launch, so two such jobs never clash.  It leaves (status 0) when the launch
    stops or retires it as idle (``release_idle_after``).
    """
    from .. import _dask
    from .outside import serving_info

    environ = os.environ if environ is None else environ
    target = serving_info(path)
    launcher, reason = choose_launcher(settings, environ)
    # Not the launcher's identity: a job array of workers has no scheduler or client
    # element, so the launcher's layout rules do not apply. Each process is a worker
    # of the other launch, named after its own job.
    job = next((environ[name] for name in _JOB_ID_VARS if environ.get(name)), "")
    name = f"join-{job or socket.gethostname()}-{os.getpid()}"
    identity = Identity(launcher=launcher.name, rank=0, size=1, launch_id=name,
                        single_host=False, reasons=(f"joins the launch behind {path}",))
    exchange = SchedulerFileExchange(path, target.launch_id, identity.rank, tombstone=True)
    plan = Plan(launcher, reason, identity, Role.WORKER, exchange, worker_name=name)
    quiet_dask_logging(environ)
    configure_rank_logging(identity.rank, "worker", identity.launch_id, environ,
                           log_dir=settings.log_dir)
    raise_open_files_limit()
    host, interface = bind_address(settings, identity, serving=True)
    try:
        status = run_until_complete(
            play_worker(_dask, settings, plan, host, interface, settings.timeout))
    except LaunchFinished:
        status = 0
    return 0 if status in _SIGNALLED else status


def _serving_scheduler_rank(_dask, settings: Settings, plan: Plan, host, interface,
                     idle_timeout: float | None) -> int:
    local = None
    if plan.role is Role.STANDALONE:
        from ..launchers.local import available_cores
        from .local_workers import LocalWorkers

        count = settings.max_workers or plan.identity.local_workers or available_cores()
        local = LocalWorkers(count).spawn()  # their start-up overlaps the scheduler's
    try:
        return run_until_complete(
            _serving_scheduler(_dask, settings, plan, host, interface, idle_timeout, local))
    finally:
        if local is not None:
            local.connect_abandoned()
            local.stop()


async def _serving_scheduler(_dask, settings: Settings, plan: Plan, host, interface,
                     idle_timeout: float | None, local) -> int:
    service, info = await start_scheduler(_dask, settings, plan, host, interface,
                                          keep_serving=True)
    coordinator = service.coordinator
    stop_on_signals(lambda signum: coordinator.end(
        0, f"the scheduler received {signal.Signals(signum).name}"))
    try:
        if local is not None:
            local.connect(join_options(settings, plan.identity, info.address, host, interface,
                                       dict(info.security)))
        plan.peers_exchange.publish(info)
        _say(f"serving at {info.address}; clients connect with "
             f"hpcfutures.connect({str(_public_path(plan.peers_exchange))!r}); stop with "
             f"'hpcfutures stop {_public_path(plan.peers_exchange)}'")
        status = await service.serve(settings.timeout, idle_timeout=idle_timeout)
        _say(f"stopping: {coordinator.reason}")
        return status
    finally:
        await service.close()
        plan.peers_exchange.finish(info)


def _public_path(exchange: AddressExchange) -> Path:
    """The scheduler file that clients from outside read."""
    public = exchange.public if isinstance(exchange, _AlsoToFile) else exchange
    assert isinstance(public, SchedulerFileExchange)  # serving_plan() made it so
    return public.path


def _say(message: str) -> None:
    """One line for the person who started the job (its output file)."""
    print(f"hpcfutures serve ({socket.gethostname()}): {message}", file=sys.stderr, flush=True)
