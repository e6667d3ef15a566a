"""Finding the launch's scheduler: look its address up, and make sure it answers.

Shared by the client and the workers (and by clients connecting from outside),
which all must tell a live scheduler from a stale entry left by an earlier one.

Only a refusal means that nobody is there: the port is closed, so the
scheduler that published it has ended.  Silence (no answer in time) means
nothing of the kind: at the start of a large launch one scheduler answers
thousands of ranks at once, a TLS handshake at a time, and a rank that took
its silence for death would reject a live scheduler file, or (under MPI)
leave a launch that has only begun.  A silent address is asked again, with
back-off and jitter, until the launch's deadline; if its port still accepts
connections (the kernel answers that, however busy the scheduler's event
loop), once more for :attr:`Patience.busy_grace`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from types import ModuleType

from .._errors import LaunchFinished, StartupTimeoutError
from .._support import interleave
from .._support.patience import Patience, jittered
from ..launchers import AddressExchange, SchedulerInfo

__all__ = ["DEAD_AFTER_REFUSALS", "PROBE_TIMEOUT", "find_scheduler"]

logger = logging.getLogger("hpcfutures")


#: Seconds a probe waits where the launch's size is not known (a client from outside).
PROBE_TIMEOUT = Patience().probe_timeout
#: Refusals in a row from one address after which nobody will ever answer there.
DEAD_AFTER_REFUSALS = 3
#: Seconds between two asks of an address that refused (a refusal is instant).
REFUSED_AGAIN_AFTER = 0.1
#: Seconds before asking a silent address again, at first; doubled each time, up to
#: :attr:`Patience.knock_every` (at least a second).
SILENT_AGAIN_AFTER = 0.1


async def find_scheduler(_dask: ModuleType, exchange: AddressExchange, timeout: float, *,
                         may_be_late: bool = False, patience: Patience | None = None,
                         spread: bool = False, rank: int = -1) -> SchedulerInfo:
    """Look the scheduler up and make sure it answers; skip stale entries until the deadline.

    ``may_be_late``: a worker, which may start after the launch ended (the
    client never can); see :attr:`AddressExchange.silence_means_finished`.
    ``patience``: the launch's waits (a probe's timeout grows with its size).
    ``rank``: who looks (for :mod:`~hpcfutures._support.interleave`'s pauses).
    ``spread``: once the address is known, wait a random part of
    :attr:`Patience.herd` before the probe (and so the join).  Every waiting
    rank learns the address in the same second (the file appears, the
    broadcast arrives); spread over the time the scheduler needs to hear them
    all, their handshakes arrive about as fast as it can take them, instead of
    thousands queueing at once behind its one event loop until their
    connections time out (Dask's connect gives up after 30 s).
    """
    patience = patience or Patience(timeout=timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    spread_over = patience.herd if spread else 0.0
    refused: SchedulerInfo | None = None
    refusals = 0
    silent_pause = SILENT_AGAIN_AFTER
    last_silent: SchedulerInfo | None = None
    graced = False
    while True:
        if (refused is not None and may_be_late and refusals >= DEAD_AFTER_REFUSALS
                and exchange.silence_means_finished):
            # A rank that starts after the end under MPI: the one answer it can
            # get names a scheduler that has closed (see _join_while_launch_lasts).
            raise LaunchFinished(f"the scheduler at {refused.address} no longer answers: "
                                 "the launch is over")
        remaining = deadline - loop.time()
        if remaining <= 0:
            waited = timeout + (patience.busy_grace if graced else 0.0)
            raise StartupTimeoutError(_never_answered(exchange, waited, refused, last_silent))
        info = await exchange.lookup_async(remaining, stale=refused)
        if spread_over:
            # Once the address is known, the spread and the queue at the scheduler are
            # the launch's size, not its lateness: neither counts against ``timeout`` (at
            # thousands of ranks each takes seconds, and a rank whose probe then met a
            # busy scheduler would run out of time at a live one).
            pause = random.uniform(0.0, spread_over)
            await asyncio.sleep(pause)
            deadline += pause + spread_over
            spread_over = 0.0
        await interleave.paused("before-connect", rank)
        security = _dask.make_security(info.security)
        remaining = max(deadline - loop.time(), 0.1)
        knock = await _dask.knock(info.address, min(patience.probe_timeout, remaining), security)
        if knock is _dask.Knock.ANSWERED:
            return info
        if knock is _dask.Knock.REFUSED:
            logger.info("nobody listens at %s; treating it as stale", info.address)
            refusals = refusals + 1 if refused is not None and refused.address == info.address \
                else 1
            refused = info
            pause = REFUSED_AGAIN_AFTER
        else:
            # Busy, not gone: the same file (or a newer one) is tried again.
            logger.info("no answer from %s yet; asking again", info.address)
            last_silent = info
            if not graced and await _dask.listening(
                    info.address, patience.knock_timeout) is _dask.Knock.ANSWERED:
                graced = True
                deadline += patience.busy_grace
                logger.info("the scheduler at %s accepts connections but is busy; waiting "
                            "up to %.0f s more", info.address, patience.busy_grace)
            pause, silent_pause = silent_pause, min(2 * silent_pause,
                                                    max(patience.knock_every, 1.0))
        await asyncio.sleep(min(jittered(pause), max(deadline - loop.time(), 0.0)))


def _never_answered(exchange: AddressExchange, timeout: float, refused: SchedulerInfo | None,
                    silent: SchedulerInfo | None) -> str:
    if silent is not None:
        where = (f"published at {silent.address} did not answer (busy, or its host cannot be "
                 "reached from here)")
    elif refused is not None:
        where = f"published at {refused.address} refused every connection (it has ended)"
    else:
        where = "was never published"
    return (f"the scheduler {where} ({exchange.description}) within {timeout:g} s; it may "
            "have died: check the scheduler rank's output")
