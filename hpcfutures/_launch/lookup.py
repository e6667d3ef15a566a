"""Finding the launch's scheduler: look its address up, and make sure it answers.

Shared by the client and the workers (and by clients connecting from outside),
which all must tell a live scheduler from a stale entry left by an earlier one.
"""

from __future__ import annotations

import asyncio
import logging
from types import ModuleType

from .._errors import LaunchFinished, StartupTimeoutError
from ..launchers import AddressExchange, SchedulerInfo

__all__ = ["DEAD_AFTER_SILENT_PROBES", "PROBE_TIMEOUT", "find_scheduler"]

logger = logging.getLogger("hpcfutures")


#: Seconds to wait for an answer when probing a published scheduler address.
PROBE_TIMEOUT = 5.0


#: Probes in a row without an answer after which a joining worker gives up.
DEAD_AFTER_SILENT_PROBES = 3


async def find_scheduler(_dask: ModuleType, exchange: AddressExchange, timeout: float, *,
                         may_be_late: bool = False) -> SchedulerInfo:
    """Look the scheduler up and make sure it answers; skip stale entries until the deadline.

    ``may_be_late``: a worker, which may start after the launch ended (the
    client never can); see :attr:`AddressExchange.silence_means_finished`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    stale: SchedulerInfo | None = None
    silent = 0
    while True:
        if (stale is not None and may_be_late and silent >= DEAD_AFTER_SILENT_PROBES
                and exchange.silence_means_finished):
            # A rank that starts after the end under MPI: the one answer it can
            # get names a scheduler that has finished (see _join_while_launch_lasts).
            raise LaunchFinished(f"the scheduler at {stale.address} no longer answers: "
                                 "the launch is over")
        remaining = deadline - loop.time()
        if remaining <= 0:
            where = "looked up" if stale is None else f"published at {stale.address}"
            raise StartupTimeoutError(
                f"the scheduler {where} ({exchange.description}) never "
                f"answered within {timeout:g} s; it may have died: check the scheduler "
                "rank's output"
            )
        info = exchange.lookup(remaining, stale=stale)
        if await _dask.probe(info.address, min(PROBE_TIMEOUT, max(remaining, 0.1)),
                             _dask.make_security(info.security)):
            return info
        logger.info("no scheduler answers at %s; treating it as stale", info.address)
        silent = silent + 1 if stale is not None and stale.address == info.address else 1
        stale = info

