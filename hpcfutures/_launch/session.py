"""One process's part in a launch: negotiate a role, play it, end it.

::

    negotiate()  launcher plug-in -> Identity -> Role, AddressExchange
    start()      SCHEDULER  serve until the client is done, exit(status)
                 WORKER     find the scheduler, serve, exit(status)
                 CLIENT     find the scheduler, connect, return the facade's bridge
                 STANDALONE scheduler in a thread + local worker processes
    finish()     (client) tell everyone the status, close, clean up

Non-client ranks leave the process with the client's verdict so launchers
return promptly and report failure truthfully.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import LaunchEndedError, LaunchFinished
from .._support.config import Settings
from .._support.limits import raise_open_files_limit
from .._support.logs import configure_rank_logging, quiet_dask_logging
from .._support.loop import run_until_complete
from ..launchers.run import RunLauncher, announce_role
from .plan import Plan, bind_address, negotiate
from .roles import Role
from .scheduler_side import play_scheduler
from .worker_side import play_worker

if TYPE_CHECKING:
    from .client_side import BridgeFactory, ClientBridge

__all__ = ["Session"]

logger = logging.getLogger("hpcfutures")

#: The launches this process has been the client of (one executor per launch).
_client_of: set[str] = set()


class Session:
    """Plays this process's role in the launch."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        self.role = Role.STANDALONE
        self.exit_status: int | None = None
        self._plan: Plan | None = None
        self._client_side: Any = None

    def start(self, make_bridge: BridgeFactory) -> ClientBridge | None:
        """Play the role; in the client process return the bridge ``make_bridge``
        made once connected, elsewhere None (or leave the process)."""
        plan = self._plan = negotiate(self.settings, self.environ)
        self.role = plan.role
        if plan.launcher.name == RunLauncher.name:
            announce_role(plan.role.value, self.environ)
        if plan.role in (Role.SCHEDULER, Role.WORKER):
            _leave_quietly_on_sigterm()
            try:
                from .. import _dask  # noqa: F401  (configures Dask's logging on import)

                quiet_dask_logging(self.environ)
                configure_rank_logging(plan.identity.rank, plan.role.value,
                                       plan.identity.launch_id, self.environ,
                                       log_dir=self.settings.log_dir)
                raise_open_files_limit(plan.identity.size, scheduler=plan.role is Role.SCHEDULER)
                _sigterm_default_again()  # the serving loop routes it from here on
                status = self._serve(plan)
            except KeyboardInterrupt:
                # Ctrl-C reaches every rank at once.  One still importing Dask
                # has no handler of its own yet; its traceback (deep inside
                # Dask's imports) would bury the client's, which is the one
                # the user needs.  It leaves as an interrupted process does.
                status = 128 + signal.SIGINT
            except SystemExit as stopped:  # SIGTERM before the rank's own handlers
                status = stopped.code if isinstance(stopped.code, int) else 1
            except Exception:
                if not self.settings.exit_when_done:
                    raise  # the caller asked to get this rank back: it gets the error
                # This rank cannot play its role (a worker setting its host rejects,
                # say).  It says why and leaves as its launcher's ranks leave: raised
                # into the script, the error could be caught there, and this rank
                # would run the client's code after the `with` block.
                logger.exception("rank %d (%s) failed", plan.identity.rank,
                                 plan.role.value)
                status = 1
            self._leave(plan, status)
            return None
        if plan.role is Role.CLIENT:
            _refuse_second_client(plan)
        raise_open_files_limit(plan.identity.size, scheduler=self.settings.scheduler_in_client)
        from .client_side import ClientSide

        self._client_side = ClientSide(self.settings, plan, make_bridge)
        bridge = self._client_side.start()
        if plan.role is Role.CLIENT:
            _client_of.add(plan.identity.launch_id)
        return bridge

    @property
    def identity(self) -> Any:
        """Who this process is in the launch (an Identity), once negotiated; else None."""
        return None if self._plan is None else self._plan.identity

    @property
    def plan(self) -> Plan | None:
        """What negotiation decided (None before :meth:`start`)."""
        return self._plan

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
            coro = play_scheduler(_dask, self.settings, plan, host, interface, timeout)
        else:
            plan.launcher.before_worker(plan.identity)
            coro = play_worker(_dask, self.settings, plan, host, interface, timeout)
        try:
            return run_until_complete(coro)
        except LaunchFinished as done:
            logger.info("rank %d: %s; nothing to do", plan.identity.rank, done)
            return 0

    def _leave(self, plan: Plan, status: int) -> None:
        self.exit_status = status
        if plan.role is Role.WORKER:
            from .._remote.leftovers import end_leftover_processes

            end_leftover_processes()
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


def _leave_quietly_on_sigterm() -> None:
    """Until a scheduler or worker rank has its own handlers, SIGTERM ends it with 143.

    A stop (scancel, the time limit, ``kill`` of the launcher) reaches every
    rank at once; one still importing Dask would otherwise die of the signal,
    and launchers report that differently from an exit (Hydra: status 15).
    """
    with contextlib.suppress(ValueError):  # not the main thread: nothing to do
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _stop_while_starting)


def _stop_while_starting(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _sigterm_default_again() -> None:
    with contextlib.suppress(ValueError):
        if signal.getsignal(signal.SIGTERM) is _stop_while_starting:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _refuse_second_client(plan: Plan) -> None:
    """One executor per launch: its other ranks leave when its client is done."""
    launch_id = plan.identity.launch_id
    if launch_id in _client_of:
        raise LaunchEndedError(
            f"this process already was the client of launch {launch_id}: a launch serves "
            "one executor, and its other ranks exit when that executor shuts down, so no "
            "process is left to serve a second one. Do all the work of a launch inside one "
            "`with Executor() as ex:` block (or pass that executor around), or start a new "
            "launch for the next one")
