"""Death certificates: a worker's watcher says how it died and running what.

Dask retries a task whose worker died on the next worker (``allowed-failures``,
3 by default), so a call that kills its worker kills three more before it
fails, and the error blames the workers.  hpcfutures' scheduler allows no
retry (``allowed_failures=0``): every task that was processing on a dead
worker comes back to the client at once as Dask's ``KilledWorker``.  The
client then asks here for the dead worker's certificate, which its watcher
(``_remote/watcher.py``) sent the scheduler, fails the culprit call with
:class:`~hpcfutures.WorkerCrashError`, and sends the others again.

Data flow::

    watcher ── hpcfutures_died(certificate) ──> scheduler (Deaths, in the Coordinator)
    client  ── hpcfutures_await_death(worker) ─> answers once the certificate is
                                                 there, or after a few seconds
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from distributed import Client, Scheduler
from distributed.comm.core import connect
from distributed.core import send_recv
from distributed.scheduler import KilledWorker

from ._common import make_security, scheduler_rpc
from .client import Knock, knock

__all__ = [
    "AWAIT_DEATH_OP", "DEATH_OP", "Deaths", "death_certificate", "lost_worker", "report_death",
]

logger = logging.getLogger("hpcfutures")

#: The watcher hands the scheduler a certificate.
DEATH_OP = "hpcfutures_died"
#: The client asks for a dead worker's certificate.
AWAIT_DEATH_OP = "hpcfutures_await_death"
#: Dask's own words when it gives up on a task; here that is the rule, not news.
_DASK_GAVE_UP = "marked as failed because"


def lost_worker(exc: BaseException | None) -> tuple[str, str] | None:
    """``(task key, worker address)`` if ``exc`` says a task's worker died under it."""
    if not isinstance(exc, KilledWorker):
        return None
    try:
        return str(exc.task), str(exc.last_worker.address)
    except (AttributeError, IndexError):
        return None


async def report_death(address: str, certificate: dict[str, Any], timeout: float,
                       credentials: Mapping[str, str] | None = None) -> bool:
    """From a dead worker's watcher: hand the scheduler at ``address`` the certificate."""
    security = make_security(credentials)
    # One knock first: a scheduler that has gone (the launch ended meanwhile)
    # refuses at once, where connect() would retry for the whole timeout.
    if await knock(address, timeout, security) is not Knock.ANSWERED:
        return False
    args = security.get_connection_args("client") if security is not None else {}
    comm = await connect(address, timeout=timeout, **args)
    try:
        reply: object = await asyncio.wait_for(
            send_recv(comm, op=DEATH_OP, certificate=certificate), timeout)
    finally:
        with contextlib.suppress(Exception):
            await comm.close()
    return reply == "ok"


async def death_certificate(client: Client, worker: str, timeout: float) -> dict[str, Any]:
    """The scheduler's word on a dead ``worker``: ``{"certificate": dict | None,
    "none_left": str | None}``, waiting up to ``timeout`` s for the certificate."""
    answer: dict[str, Any] = await asyncio.wait_for(
        getattr(scheduler_rpc(client), AWAIT_DEATH_OP)(worker=worker, timeout=timeout),
        timeout + 5)
    return answer


class Deaths:
    """The scheduler's register of dead workers (held by the Coordinator).

    Also knows when no worker is left and none can come: ``capacity`` is how
    many workers the launch can ever have (its worker ranks, or the laptop's
    local worker processes); once that many have joined or failed to start,
    and none is connected, the executor cannot run anything any more.
    """

    def __init__(self) -> None:
        self.certificates: dict[str, dict[str, Any]] = {}
        self.departed: list[str] = []
        self.capacity: int | None = None
        self._news = asyncio.Event()

    def install(self, scheduler: Scheduler) -> None:
        scheduler.handlers[DEATH_OP] = self.record
        logging.getLogger("distributed.scheduler").addFilter(_not_dask_giving_up)

    def record(self, certificate: dict[str, Any]) -> str:
        worker = str(certificate.get("worker"))
        self.certificates[worker] = certificate
        logger.warning("%s", summary(certificate))
        self._news.set()
        return "ok"

    def departed_worker(self, worker: str) -> None:
        self.departed.append(worker)
        self._news.set()

    def none_left(self, present: int, joined: int, failed_to_start: int) -> bool:
        """Whether no worker can run anything any more."""
        if present or self.capacity is None or joined + failed_to_start < self.capacity:
            return False
        return len(self.departed) >= joined

    async def why_none_left(self, wait: float) -> str:
        """Each departed worker's cause of death (waiting up to ``wait`` s in all for
        the certificates still on their way: a watcher takes a second or two)."""
        deadline = time.monotonic() + wait
        for worker in self.departed:
            await self.await_certificate(worker, max(deadline - time.monotonic(), 0.0))
        causes = [summary(self.certificates[w]) if w in self.certificates else
                  f"the worker at {w} was lost" for w in self.departed]
        return "no worker is left, and none can join this launch: " + "; ".join(causes)

    async def await_certificate(self, worker: str, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while worker not in self.certificates:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._news.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._news.wait(), left)
        return self.certificates[worker]


def summary(certificate: Mapping[str, Any]) -> str:
    """``rank 2 (worker) on node17 died running job.boom: killed by SIGSEGV``."""
    how = certificate.get("how")
    why = (f"exit status {certificate.get('status')}" if how == "exit" else
           f"killed by {certificate.get('signal')}" if how == "signal" else
           "killed from outside (SIGKILL, the OOM killer?)")
    culprit = certificate.get("culprit")
    doing = f" running {culprit['function']}" if culprit else ""
    return f"{certificate.get('who')} died{doing}: {why}"


def _not_dask_giving_up(record: logging.LogRecord) -> bool:
    return _DASK_GAVE_UP not in str(record.msg)
