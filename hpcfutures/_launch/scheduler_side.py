"""The scheduler's part: start it with fresh credentials, publish it, serve until the end."""

from __future__ import annotations

import logging
import signal
from types import ModuleType

from .._support import environment, interleave
from .._support.config import Settings
from .._support.loop import stop_on_signals
from ..launchers import SchedulerInfo
from .plan import Plan
from .roles import Role

__all__ = ["expected_workers", "launch_credentials", "play_scheduler", "start_scheduler"]

logger = logging.getLogger("hpcfutures")


def launch_credentials(settings: Settings) -> dict[str, str]:
    """Fresh TLS credentials for a new scheduler, or none when security is off."""
    if not settings.security:
        logger.warning("security=False: the scheduler accepts anyone who can reach its port")
        return {}
    from .._support.security import new_credentials

    return new_credentials()


async def start_scheduler(_dask: ModuleType, settings: Settings, plan: Plan, host, interface,
                          keep_serving: bool = False):
    """Start a scheduler with fresh credentials; return it and what to publish.

    ``keep_serving``: a launch without a client of its own (``hpcfutures serve``).
    """
    credentials = launch_credentials(settings)
    service = await _dask.SchedulerService(
        host=host, interface=interface, security=_dask.make_security(credentials),
        keep_serving=keep_serving, dashboard=settings.dashboard,
        dashboard_address=settings.dashboard_address,
        expected_workers=expected_workers(settings, plan, keep_serving)).start()
    if settings.release_idle_after is not None:
        service.release_idle_workers(settings.release_idle_after, settings.min_workers)
    info = SchedulerInfo(address=service.address, launch_id=plan.identity.launch_id,
                         security=credentials, serving=keep_serving,
                         versions=environment.versions(), import_path=environment.import_path())
    return service, info


def expected_workers(settings: Settings, plan: Plan, keep_serving: bool) -> int | None:
    """How many worker ranks the launch has; None for a standalone process, whose
    local workers the client counts."""
    if plan.role is Role.STANDALONE:
        return None
    others = 1 if keep_serving or settings.scheduler_in_client else 2  # scheduler, client
    return max(plan.identity.size - others, 0)


async def play_scheduler(_dask: ModuleType, settings: Settings, plan: Plan, host, interface,
                           timeout: float) -> int:
    service, info = await start_scheduler(_dask, settings, plan, host, interface)
    stop_on_signals(lambda signum: service.coordinator.end(
        128 + signum, f"the scheduler received {signal.Signals(signum).name}"))
    try:
        plan.peers_exchange.publish(info)
        logger.info("scheduler at %s (%s)", service.address, plan.peers_exchange.description)
        return await service.serve(client_timeout=timeout)
    finally:
        await service.close()
        await interleave.paused("scheduler-closing", plan.identity.rank)
        plan.peers_exchange.finish(info)

