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
import collections
import contextlib
import logging
import re
import time
import weakref
from collections.abc import Mapping
from typing import Any

from distributed import Client, Scheduler
from distributed.comm.core import connect
from distributed.core import send_recv
from distributed.scheduler import KilledWorker

from .._support.patience import jittered
from .._support.waves import WaveLog, count_causes
from ._common import make_security, scheduler_rpc
from .client import Knock, listening

__all__ = [
    "AWAIT_DEATH_OP", "DEATH_OP", "Deaths", "death_certificate", "death_certificates",
    "lost_worker", "report_death",
]

logger = logging.getLogger("hpcfutures")

#: The watcher hands the scheduler a certificate.
DEATH_OP = "hpcfutures_died"
#: The client asks for a dead worker's certificate.
AWAIT_DEATH_OP = "hpcfutures_await_death"
#: Dask's own words when it gives up on a task; here that is the rule, not news.
_DASK_GAVE_UP = "marked as failed because"
#: How many dead workers a message names before it counts the others by cause.
NAMED_DEATHS = 5
#: The cause of death of a worker whose certificate never came.
LOST = "lost"
#: Seconds after a worker left without a certificate during which certificates still
#: belong to its wave, however far apart they come: a scheduler busy with a map takes
#: a large wave's reports in bursts, which can spread over tens of seconds.
CERTIFICATES_EXPECTED_FOR = 30.0


def lost_worker(exc: BaseException | None) -> tuple[str, str] | None:
    """``(task key, worker address)`` if ``exc`` says a task's worker died under it."""
    if not isinstance(exc, KilledWorker):
        return None
    try:
        return str(exc.task), str(exc.last_worker.address)
    except (AttributeError, IndexError):
        return None


async def report_death(address: str, certificate: dict[str, Any], timeout: float,
                       credentials: Mapping[str, str] | None = None, *,
                       keep_trying: float = CERTIFICATES_EXPECTED_FOR) -> bool:
    """From a dead worker's watcher: hand the scheduler at ``address`` the certificate.

    Each try waits up to ``timeout`` s.  One that goes unanswered while the
    scheduler's port still accepts connections (it is there, and busy) is made
    again, a second or so later, until ``keep_trying`` s have passed: a
    scheduler busy with a map and a wave of deaths (hundreds of watchers
    reporting at once) may answer none of them in time, and a report given up
    after one try could leave every dead worker of the wave uncertified, so
    that the client waits out its whole window for each.  A scheduler that
    cannot be reached at all (its node's network is
    down) gets one try, as a watcher must not outlive its launch by much.
    """
    security = make_security(credentials)
    args = security.get_connection_args("client") if security is not None else {}
    deadline = time.monotonic() + keep_trying
    while True:
        # A look at the port first: a scheduler that has gone (the launch ended
        # meanwhile) refuses at once, where connect() would retry for the whole
        # timeout.  TCP only: a TLS knock would cost the scheduler a second handshake
        # per report, and a wave of hundreds of reports would queue behind them.
        knock = await listening(address, timeout)
        if knock is Knock.REFUSED:
            return False
        try:
            return await _hand_over(address, certificate, timeout, args)
        except (OSError, asyncio.TimeoutError):
            left = deadline - time.monotonic()
            if knock is not Knock.ANSWERED or left <= 0:
                raise
            await asyncio.sleep(min(jittered(1.0), left))


async def _hand_over(address: str, certificate: dict[str, Any], timeout: float,
                     args: dict[str, Any]) -> bool:
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
    return await _ask_about_deaths(client, timeout, worker=worker)


async def death_certificates(client: Client, workers: list[str],
                             timeout: float) -> dict[str, dict[str, Any]]:
    """:func:`death_certificate` for each of ``workers``, in one request (one connection
    to the scheduler for a whole wave of deaths, where each request in flight opens
    one of its own)."""
    answer = await _ask_about_deaths(client, timeout, workers=list(workers))
    answers: dict[str, dict[str, Any]] = answer["answers"]
    return answers


async def _ask_about_deaths(client: Client, timeout: float, **question: Any) -> dict[str, Any]:
    """The scheduler's answer waits up to ``timeout`` s for certificates; the request
    itself gets 5 s more to travel."""
    answer: dict[str, Any] = await asyncio.wait_for(
        getattr(scheduler_rpc(client), AWAIT_DEATH_OP)(timeout=timeout, **question),
        timeout + 5)
    return answer


class Deaths:
    """The scheduler's register of dead workers (held by the Coordinator).

    Also knows when no worker is left and none can come: ``capacity`` is how
    many workers the launch can ever have (its worker ranks, or the laptop's
    local worker processes); once that many have joined or failed to start,
    and none is connected, the executor cannot run anything any more.

    Built for many deaths at once (a node or a switch lost, the OOM killer
    on a partition): every client request waits on a future of the worker it
    asks about, so a certificate wakes only the requests that wait for it
    (O(deaths) wake-ups in all, where one shared event would wake every
    request at every certificate, O(deaths²), enough to keep the scheduler's
    loop busy for the whole wait at 1,000 deaths); the causes of death are
    counted as they come, so that the
    "none is left" message costs the same at 10 deaths as at 10,000, and names
    only the first few; and a wave of deaths is logged as one summary line.
    """

    def __init__(self) -> None:
        self.certificates: dict[str, dict[str, Any]] = {}
        self.departed: list[str] = []
        self._departed: set[str] = set()
        self.capacity: int | None = None
        #: Worker -> the futures of the requests waiting for its certificate.
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        #: Departed workers whose certificate has not come (yet).
        self._uncertified: set[str] = set()
        #: Causes of the departed workers' deaths ("lost" until a certificate says).
        self._causes: collections.Counter[str] = collections.Counter()
        #: Set once every departed worker's certificate is in (why_none_left waits for it).
        self._all_certified: asyncio.Future[None] | None = None
        #: When the latest worker left before its certificate came.
        self._last_uncertified = 0.0
        self._log = WaveLog(logger, "worker died", "workers died", expecting=self._expecting)
        self._heartbeat_filter: _LateHeartbeats | None = None

    def install(self, scheduler: Scheduler) -> None:
        scheduler.handlers[DEATH_OP] = self.record
        logging.getLogger("distributed.scheduler").addFilter(_not_dask_giving_up)
        self._heartbeat_filter = _LateHeartbeats(self)
        logging.getLogger("distributed.scheduler").addFilter(self._heartbeat_filter)

    def uninstall(self) -> None:
        """The scheduler closed: its departed workers say nothing about another's."""
        if self._heartbeat_filter is not None:
            logging.getLogger("distributed.scheduler").removeFilter(self._heartbeat_filter)
            self._heartbeat_filter = None

    def record(self, certificate: dict[str, Any]) -> str:
        worker = str(certificate.get("worker"))
        if worker in self._uncertified:
            self._uncertified.discard(worker)
            self._recount(LOST, cause(certificate))
        elif worker in self.certificates and worker in self._departed:  # a second one
            self._recount(cause(self.certificates[worker]), cause(certificate))
        self.certificates[worker] = certificate
        self._log.add(summary(certificate), cause(certificate))
        for waiter in self._waiters.pop(worker, ()):
            if not waiter.done():
                waiter.set_result(None)
        if not self._uncertified and self._all_certified is not None:
            if not self._all_certified.done():
                self._all_certified.set_result(None)
        return "ok"

    def departed_worker(self, worker: str) -> None:
        """A worker left the scheduler.  Nobody waits for a departure itself (a
        request waits for a certificate, which may come before or after it)."""
        if worker in self._departed:
            return
        self.departed.append(worker)
        self._departed.add(worker)
        if worker in self.certificates:
            self._causes[cause(self.certificates[worker])] += 1
        else:
            self._uncertified.add(worker)
            self._causes[LOST] += 1
            self._last_uncertified = time.monotonic()

    def _expecting(self) -> bool:
        """Whether certificates of a recent wave of departures are still on their way."""
        return bool(self._uncertified) and (
            time.monotonic() - self._last_uncertified < CERTIFICATES_EXPECTED_FOR)

    def _recount(self, was: str, now: str) -> None:
        self._causes[was] -= 1
        if self._causes[was] <= 0:
            del self._causes[was]
        self._causes[now] += 1

    def none_left(self, present: int, joined: int, failed_to_start: int) -> bool:
        """Whether no worker can run anything any more."""
        if present or self.capacity is None or joined + failed_to_start < self.capacity:
            return False
        return len(self.departed) >= joined

    async def why_none_left(self, wait: float) -> str:
        """Why no worker is left: the first few departed workers' causes of death,
        then the others counted by cause.  Waits up to ``wait`` s for the
        certificates still on their way (a watcher takes a second or two).

        Every request that finds no worker left asks this, so it must not cost
        O(departed): one future says when the last missing certificate came,
        and the causes were counted as the workers left and certified.
        """
        if self._uncertified and wait > 0:
            if self._all_certified is None or self._all_certified.done():
                self._all_certified = asyncio.get_running_loop().create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._all_certified), wait)
        named = self.departed[:NAMED_DEATHS]
        causes = [summary(self.certificates[w]) if w in self.certificates else
                  f"the worker at {w} was lost" for w in named]
        rest = len(self.departed) - len(named)
        if rest > 0:
            others = collections.Counter(self._causes)
            for worker in named:
                others[cause(self.certificates[worker]) if worker in self.certificates
                       else LOST] -= 1
            causes.append(f"and {rest} more: {count_causes(others)}")
        return "no worker is left, and none can join this launch: " + "; ".join(causes)

    async def await_certificate(self, worker: str, timeout: float) -> dict[str, Any] | None:
        """``worker``'s certificate, waiting up to ``timeout`` s for it to come.

        The request waits on a future of its own, which only ``worker``'s
        certificate completes: other deaths do not wake it."""
        if worker in self.certificates:
            return self.certificates[worker]
        if timeout <= 0:
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiters.setdefault(worker, [])
        waiting.append(waiter)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter, timeout)
        finally:
            if self._waiters.get(worker) is waiting:  # no certificate came: withdraw
                waiting.remove(waiter)
                if not waiting:
                    del self._waiters[worker]
        return self.certificates.get(worker)

    def flush_log(self) -> None:
        """Log the summary of a wave of deaths still held (the scheduler is closing)."""
        self._log.flush()


def summary(certificate: Mapping[str, Any]) -> str:
    """``rank 2 (worker) on node17 died running job.boom: killed by SIGSEGV``."""
    how = certificate.get("how")
    why = (f"exit status {certificate.get('status')}" if how == "exit" else
           f"killed by {certificate.get('signal')}" if how == "signal" else
           "killed from outside (SIGKILL, the OOM killer?)")
    culprit = certificate.get("culprit")
    doing = f" running {culprit['function']}" if culprit else ""
    return f"{certificate.get('who')} died{doing}: {why}"


def cause(certificate: Mapping[str, Any]) -> str:
    """How a worker died, in words that follow a count: ``killed by SIGSEGV``."""
    how = certificate.get("how")
    return (f"exited with status {certificate.get('status')}" if how == "exit" else
            f"killed by {certificate.get('signal')}" if how == "signal" else
            "killed from outside (SIGKILL, the OOM killer?)")


class _LateHeartbeats(logging.Filter):
    """Drops Dask's warning about a heartbeat from a worker that already departed.

    A worker's heartbeat travels on its own connection: one sent just before
    the worker died can be read after its departure was.  Dask then warns of
    an "unregistered worker"; when hundreds die at once, a dozen such lines
    would bury the one summary line of the wave.  From a worker never seen, the
    warning stays.  The filter sits on Dask's process-wide logger and holds
    its register weakly: a process may run one scheduler after another (tests,
    serving), and one's departed workers must neither outlive it nor silence
    another's warnings.
    """

    def __init__(self, deaths: Deaths) -> None:
        super().__init__()
        self._deaths = weakref.ref(deaths)

    def filter(self, record: logging.LogRecord) -> bool:
        deaths = self._deaths()
        if deaths is None:
            return True
        found = _LATE_HEARTBEAT.search(str(record.msg))
        return found is None or found.group(1) not in deaths._departed


#: Dask's warning about a heartbeat from a worker it does not know (its address quoted).
_LATE_HEARTBEAT = re.compile(r"Received heartbeat from unregistered worker '([^']+)'")


def _not_dask_giving_up(record: logging.LogRecord) -> bool:
    return _DASK_GAVE_UP not in str(record.msg)
