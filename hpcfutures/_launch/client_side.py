"""The client's side of a launch: connect, hand the facade its bridge, end the launch.

Runs on the client's loop thread; the user's thread only calls :meth:`start`
and :meth:`finish`.  The bridge between ``concurrent.futures`` and Dask belongs
to the facade (:mod:`hpcfutures._facade.bridge`), a layer above this one: the
facade passes in how to make it, and this module sees it only through
:class:`ClientBridge`, what the client role needs of it.

In the laptop default (and with ``scheduler_in_client``) the scheduler lives
on the same loop thread, and on the laptop the workers are child processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from .._errors import HPCFuturesError, StartupTimeoutError
from .._remote.modules import note_import_path, pickled_by_value, to_ship
from .._support import environment
from .._support.config import Settings
from .._support.limits import client_connections
from .._support.logs import (
    configure_rank_logging,
    quiet_dask_logging,
    quiet_for_shutdown,
    where_to_read,
)
from .._support.loop import LoopThread
from .._support.patience import Patience
from .._support.signals import StopSignals
from ..launchers import SchedulerInfo
from ..launchers._identity import SCHEDULER_RANK, minimum_size
from ..launchers.local import available_cores
from .lookup import find_scheduler
from .plan import Plan, bind_address
from .roles import Role
from .scheduler_side import start_scheduler
from .verdict_line import verdict_after_traceback

__all__ = ["BridgeFactory", "ClientBridge", "ClientSide"]

logger = logging.getLogger("hpcfutures")

#: The client's waits for the launch (its wind-down, the summary's numbers, the
#: goodbye) come from Patience: they grow with the number of ranks.


class ClientBridge(Protocol):
    """What the client role needs of the facade's bridge (``_facade.bridge.TaskBridge``)."""

    #: Set when a signal ends the launch: a vanishing scheduler is then expected.
    stopped_by_signal: bool
    #: Where to look when the scheduler is lost (a rank's log), for error messages.
    scheduler_pointer: str
    #: The workers seen so far (``_facade.core.roster.WorkerRoster``), named in errors.
    roster: Any
    #: The end-of-run summary's client-side tally, when summary=True.
    tally: Any
    #: The launch's waits, from its size.
    patience: Patience

    @property
    def broken(self) -> HPCFuturesError | None:
        """Why the executor is broken, or None."""

    @property
    def crash_status(self) -> int | None:
        """The exit status of the first worker a call killed (its rank left), or None."""

    def cluster_changed(self, workers: int, threads: int, left: Sequence[str] = ()) -> None:
        """Dask announced the cluster's size (workers joined or left; ``left``: the
        addresses of those that left)."""

    #: How the keys of the tasks it sends start (their small results' topic).
    key_prefix: str

    def result_arrived(self, key: Any, payload: bytes) -> None:
        """A task's small result, sent ahead of its end (loop thread)."""

    async def ends_heard(self, timeout: float) -> None:
        """Until Dask has told the end of every task whose result came ahead."""

    def watch_workers(self, timeout: float) -> Coroutine[Any, Any, None]:
        """Watch for all workers gone while calls wait (runs on the loop)."""

    def closing(self) -> None:
        """The launch is ending: lost futures are no longer a failure."""

    def break_executor(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail every outstanding and later call with ``BrokenHPCExecutor`` (from ``cause``)."""


#: How the facade makes its bridge: (loop, Dask client, scheduler address, threads).
BridgeFactory = Callable[[LoopThread, Any, str, int], ClientBridge]


class ClientSide:
    """Everything the client process owns while the executor is open."""

    def __init__(self, settings: Settings, plan: Plan, make_bridge: BridgeFactory) -> None:
        self.settings = settings
        self.plan = plan
        self.make_bridge = make_bridge
        self.loop: LoopThread | None = None
        self.client: Any = None
        self.service: Any = None
        self.info: SchedulerInfo | None = None
        self.local_workers: Any = None
        self.bridge: ClientBridge | None = None
        self.credentials: dict[str, str] = {}
        #: Where the launch's processes import from (see _remote/modules.py).
        self.import_path: list[str] = []
        self._signals: StopSignals | None = None
        #: The end-of-run summary's client tally and scheduler ledger (summary=True).
        self.tally: Any = None
        self._ledger: str | None = None
        self.patience = Patience.for_launch(plan.identity.size, settings.timeout)

    def start(self) -> ClientBridge:
        if self.settings.summary:
            from .._reports.summary import CallTally

            self.tally = CallTally()  # the wall time starts now
        if self.plan.role is Role.STANDALONE:
            self._spawn_local_workers()  # first: their start-up overlaps ours
        from .. import _dask

        quiet_dask_logging()
        # Tag log lines with the rank inside a launch; a client connected from
        # outside a serving launch (a launch of its own, size 1) has no rank.
        if self.plan.role is not Role.STANDALONE and self.plan.identity.size > 1:
            configure_rank_logging(self.plan.identity.rank, self.plan.role.value,
                                   self.plan.identity.launch_id,
                                   log_dir=self.settings.log_dir)
        self.loop = LoopThread()
        try:
            address = self._scheduler_address(_dask)
            self.plan.launcher.before_client(self.plan.identity)
            timeout = self.settings.timeout
            exchange = self.plan.exchange
            self.client = self._run(
                _dask.connect_client(address, timeout, _dask.make_security(self.credentials),
                                     client_connections(self.plan.identity.size),
                                     exchange is None or exchange.direct_to_workers),
                timeout, f"connecting to the scheduler at {address}")
            note_import_path(self.client, self.import_path)  # see _remote/modules.py
            if self.local_workers is not None:
                self._connect_local_workers(address)
            # Workers may still be queued (job-array elements): the launcher's wait.
            peers = self.plan.launcher.lookup_timeout(self.plan.identity)
            self._run(_dask.wait_for_workers(self.client, peers), peers,
                      f"the first worker to join the scheduler at {address}")
        except BaseException:
            self._teardown(_dask.EXIT_FAILED)
            raise
        threads = self.loop.run_sync(_dask.total_threads(self.client), self.settings.timeout)
        self.bridge = self.make_bridge(self.loop, self.client, address, threads)
        self.bridge.patience = self.patience
        _dask.expect_express_results(self.client, self.bridge.key_prefix,
                                     self.bridge.result_arrived)
        self.loop.run_sync(_dask.follow_cluster(self.client, self.bridge.cluster_changed),
                           self.settings.timeout)
        if self.settings.initializer is not None:
            self._start_initializer(_dask)
        self._attach_reports(_dask)
        self.loop.call_soon(asyncio.ensure_future, self.bridge.watch_workers(self.settings.timeout))
        self._catch_sigterm()
        self._warn_of_ignored_max_workers()
        return self.bridge

    def _warn_of_ignored_max_workers(self) -> None:
        """Under a launcher the ranks decide how many workers there are: say so when
        ``max_workers`` asked for another number (a ProcessPoolExecutor habit)."""
        asked = self.settings.max_workers
        if asked is None or self.plan.role is Role.STANDALONE:
            return
        ranks = self.plan.identity.size - minimum_size(self.settings.scheduler_in_client) + 1
        if asked != ranks:
            logger.warning(
                "max_workers=%d (%s) is ignored under a launcher: this launch of %d processes "
                "has %d worker rank(s), the processes left after the scheduler and the client; "
                "launch more or fewer processes instead", asked,
                self.settings.sources.get("max_workers", "given"), self.plan.identity.size,
                ranks)

    def _start_initializer(self, _dask) -> None:
        """Every worker runs the executor's initializer before its first call (those
        present before this returns, those that join later as they join)."""
        from .._remote.initializer import pack_initializer

        assert self.settings.initializer is not None
        try:
            with pickled_by_value(to_ship(self.client)):  # the user's modules it uses
                payload = pack_initializer(self.settings.initializer, self.settings.initargs)
            self._run(_dask.register_initializer(self.client, payload, self._initializer_failed),
                      self.settings.timeout, "the workers present to run the initializer")
        except BaseException:
            self._teardown(_dask.EXIT_FAILED)
            raise

    def _initializer_failed(self, error: BaseException, worker: str) -> None:
        """As with ``ProcessPoolExecutor``: an initializer that raised breaks the executor."""
        assert self.bridge is not None
        name = getattr(self.settings.initializer, "__qualname__", repr(self.settings.initializer))
        self.bridge.break_executor(
            f"the initializer {name!r} raised {type(error).__name__}: {error} in worker "
            f"{worker}, and no call runs where it failed", cause=error)

    def _scheduler_address(self, _dask) -> str:
        """Start the scheduler here, or find the one another rank published."""
        plan = self.plan
        timeout = plan.launcher.lookup_timeout(plan.identity)
        if plan.role is Role.STANDALONE or self.settings.scheduler_in_client:
            host, interface = bind_address(self.settings, plan.identity)
            plan.launcher.before_scheduler(plan.identity)
            self.service, info = self._run(
                start_scheduler(_dask, self.settings, plan, host, interface),
                self.settings.timeout, "starting the scheduler")
            if self.local_workers is not None:  # once they are gone, none is left
                self.service.expect_at_most(self.local_workers.count)
            if plan.exchange is not None:
                self.info = info
                plan.exchange.publish(info)
        else:
            exchange = plan.peers_exchange
            patience = Patience.for_launch(plan.identity.size, timeout)
            info = self._run(find_scheduler(_dask, exchange, timeout, patience=patience,
                                            rank=plan.identity.rank),
                             timeout + patience.busy_grace + patience.probe_timeout + 1,
                             exchange.description)
            environment.check("this client", info.versions,
                              f"the scheduler of launch {info.launch_id} on {info.host}")
        self.import_path = list(info.import_path) or environment.import_path()
        self.credentials = dict(info.security)
        return info.address

    def _spawn_local_workers(self) -> None:
        from .local_workers import LocalWorkers

        count = self.settings.max_workers or self.plan.identity.local_workers or available_cores()
        self.local_workers = LocalWorkers(count).spawn()

    def _connect_local_workers(self, address: str) -> None:
        from .local_workers import join_options

        host, interface = bind_address(self.settings, self.plan.identity)
        self.local_workers.connect(join_options(self.settings, self.plan.identity, address,
                                                host, interface, self.credentials))

    def _run(self, coro, timeout: float, what: str):
        assert self.loop is not None
        try:
            return self.loop.run_sync(coro, timeout)
        except TimeoutError as err:
            if isinstance(err, StartupTimeoutError):
                raise
            raise StartupTimeoutError(
                f"rank {self.plan.identity.rank} (client) waited {timeout:g} s for {what}; "
                "check the other ranks' output, or raise the deadline with timeout= / "
                "HPCFUTURES_TIMEOUT"
            ) from None

    # ------------------------------------------------------------------ signals
    def _catch_sigterm(self) -> None:
        """Turn SIGTERM (scancel, time limit) into a clean exit through ``__exit__``,
        and make sure no SIGTERM or Ctrl-C is lost on the way (see StopSignals)."""
        self._signals = StopSignals(self._on_sigterm)
        self._signals.install()

    def _on_sigterm(self, signum: int) -> None:
        # The whole launch is being stopped: the scheduler vanishing next is
        # part of that, not a broken executor worth an error of its own (the
        # futures still fail, so nothing waits for them).
        if self.bridge is not None:
            self.bridge.stopped_by_signal = True
        # From here on Dask's complaints (a result fetched from a worker that is
        # closing, a connect cut mid-handshake) only echo the stop said below.
        quiet_for_shutdown()
        # Say why the client stops: otherwise the user sees only an exit status.
        logger.warning("the client received %s (scancel, the job's time limit, or kill): "
                       "cancelling its tasks and ending the launch", signal.Signals(signum).name)

    def _restore_sigterm(self) -> None:
        if self._signals is not None:
            self._signals.uninstall()
            self._signals = None

    # ------------------------------------------------------------------ reports
    def _attach_reports(self, _dask) -> None:
        """Rank pointers for errors, and the opt-in dashboard line and summary ledger."""
        assert self.bridge is not None
        identity = self.plan.identity
        if identity.size > 1:  # a rank of a launch: the other ranks' logs have known names
            if not self.settings.scheduler_in_client:
                where = where_to_read(SCHEDULER_RANK, "scheduler", identity.launch_id,
                                      log_dir=self.settings.log_dir)
                self.bridge.scheduler_pointer = (
                    f"rank {SCHEDULER_RANK} (scheduler) probably died; {where}")
            self.bridge.roster.pointer = functools.partial(
                _worker_pointer, identity.launch_id, self.settings.log_dir)
        if self.settings.dashboard:
            from .._reports.dashboard import announce_dashboard

            announce_dashboard(self._ask(_dask.dashboard_facts(self.client)))
        if self.tally is not None:
            self.bridge.tally = self.tally
            self._ledger = self._ask(_dask.start_usage(self.client))
            self.tally.mark_ready()

    def _ask(self, coro, timeout: float | None = None) -> Any:
        """A report's question to the scheduler; None if it goes unanswered."""
        assert self.loop is not None
        try:
            return self.loop.run_sync(coro, timeout or self.settings.timeout)
        except Exception:
            logger.debug("the scheduler did not answer a report's question", exc_info=True)
            return None

    def _print_summary(self) -> None:
        from .. import _dask
        from .._reports.summary import format_summary

        usage = None
        if self._ledger is not None and self.bridge is not None and self.bridge.broken is None:
            self._ask(self.bridge.ends_heard(1.0))  # results that came ahead of their end
            usage = self._ask(_dask.usage_report(self.client, self._ledger),
                              self.patience.ask_timeout)
        print(format_summary(self.tally, usage), file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ the end
    def finish(self, status: int) -> None:
        """Tell the scheduler (and so every rank) the status, then clean up."""
        if self.bridge is not None:
            self.bridge.closing()
            if self.tally is not None:
                self._print_summary()
        self._teardown(status)
        self.plan.launcher.client_finished(self.plan.identity, status,
                                           crashed=self._crashed_rank_status())

    def _crashed_rank_status(self) -> int | None:
        """The exit status of a worker rank a call killed during the launch, if any.

        The client was told (WorkerCrashError) and decides what to make of it; but
        ``srun``, ``mpiexec`` and the batch systems report every rank's status, and
        that rank's process is gone: the launcher will return its status, whatever
        the client does.  ``hpcfutures run`` follows the client's status instead.
        """
        crashed = self.bridge.crash_status if self.bridge is not None else None
        if crashed is None or self.plan.role is Role.STANDALONE:
            return None
        if self.plan.launcher.reports_every_rank:
            logger.warning("a call killed a worker rank (exit status %d) during this launch: "
                           "the launcher (%s) reports every rank's status, so the launch "
                           "ends with it", crashed, self.plan.launcher.name)
        return crashed

    def _teardown(self, status: int) -> None:
        from .. import _dask

        self._restore_sigterm()
        loop = self.loop
        if loop is None:
            return
        # Stopped by a signal, the scheduler got it too and is closing: it may
        # never confirm the close, so do not wait for that.
        signalled = status in (130, 143) or (
            self.bridge is not None and self.bridge.stopped_by_signal)  # Ctrl-C, SIGTERM
        with verdict_after_traceback(status != 0 and self.plan.role is Role.STANDALONE):
            with contextlib.suppress(Exception):
                if self.client is not None:
                    goodbye = 1.0 if signalled else self.patience.ask_timeout
                    loop.run_sync(_dask.finish_client(self.client, status, timeout=goodbye,
                                                      fast=signalled),
                                  self.patience.grace * 2)
            with contextlib.suppress(Exception):
                if self.service is not None:
                    loop.run_sync(self.service.close(), self.patience.grace)
        if self.info is not None and self.plan.exchange is not None:
            with contextlib.suppress(Exception):
                self.plan.exchange.finish(self.info)
        if self.local_workers is not None:
            self.local_workers.connect_abandoned()
            self.local_workers.stop()
        loop.stop()
        self.loop = None


def _worker_pointer(launch_id: str, log_dir: str | None, name: str) -> tuple[str, str]:
    """(who, where to look) for a worker of this launch, named ``rank-N`` by its rank."""
    match = re.fullmatch(r"rank-(\d+)", name)
    if match is None:
        return f"worker {name}", "see its output"
    rank = int(match.group(1))
    return f"rank {rank} (worker)", where_to_read(rank, "worker", launch_id, log_dir=log_dir)
