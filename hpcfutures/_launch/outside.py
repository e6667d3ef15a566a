"""A client outside a serving launch (``hpcfutures serve``): finding it, joining it, stopping it.

::

    notebook / login node                          the job (hpcfutures serve)
    ─────────────────────                          ──────────────────────────
    connect(file) ── read file (yours, 0600?) ──>  scheduler file: address, TLS
                  ── ClientSide ────────────────>  scheduler  ── workers
    leave ── disconnect only                       keeps serving
    stop(file) ── hpcfutures_stop ───────────────> every rank exits 0
                  <── the file turns into a "stopped" marker ──

The client plays the ordinary client role (:class:`~.client_side.ClientSide`),
reached through a plan whose "launcher" is the scheduler file.  Everything that
can go wrong before a connection is explained by :class:`NotServingError` or
:class:`SchedulerFileError`, saying what to do.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .._errors import NotServingError, SchedulerFileError, StopTimeoutError
from .._support.backoff import Backoff
from .._support.config import Settings
from ..launchers import AddressExchange, Launcher, SchedulerInfo
from ..launchers._identity import Identity
from ..launchers._schedfile import read_scheduler_file
from .lookup import PROBE_TIMEOUT
from .plan import Plan
from .roles import Role
from .session import Session

if TYPE_CHECKING:
    from .client_side import BridgeFactory, ClientBridge

__all__ = ["FileReader", "OutsideSession", "expand_path", "serving_info", "stale_error",
           "stop_launch"]


# ------------------------------------------------------------ the file
def expand_path(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(os.fspath(path))))


def _start_hint(path: Path) -> str:
    return (f"start one with 'srun -n4 hpcfutures serve --scheduler-file {path}' (in an "
            "sbatch script or an allocation), or 'hpcfutures run -n 3 hpcfutures serve "
            f"--scheduler-file {path}' on this machine")


def _when(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


#: Reads a scheduler file: this machine's (the default), or one on a cluster through SSH.
FileReader = Callable[[Path], "SchedulerInfo | None"]


def serving_info(path: Path, read: FileReader = read_scheduler_file) -> SchedulerInfo:
    """The published info of the serving launch behind ``path``, or why there is none.

    Does not contact the scheduler; :func:`stale_error` explains one that
    does not answer.
    """
    try:
        info = read(path)
    except PermissionError as err:
        raise SchedulerFileError(
            f"cannot read the scheduler file {path}: permission denied. Only the user who "
            "started the serving launch can connect to it (the file holds its credentials)"
        ) from err
    if info is None:
        raise NotServingError(
            f"no scheduler file at {path}: no serving launch has written it (yet). If your "
            "job is still queued or starting, wait (connect(..., wait=SECONDS)); otherwise "
            f"{_start_hint(path)}. The path must be the one given to serve, on a filesystem "
            "this machine shares with the job")
    if info.finished:
        raise NotServingError(
            f"the launch that wrote {path} ({info.launch_id}) stopped at {_when(info.created)}; "
            f"nothing serves there any more: {_start_hint(path)}")
    if info.address.startswith("tls://") and not info.security:
        raise SchedulerFileError(
            f"{path} names a TLS address ({info.address}) but holds no credentials for it; "
            "it was not written by hpcfutures serve: remove it and start the launch again")
    if not info.serving:
        raise NotServingError(
            f"{path} belongs to launch {info.launch_id}, which runs its own client (a script "
            "with hpcfutures.Executor()) and accepts no other; only a launch started with "
            "'hpcfutures serve' can be connected to")
    return info


def stale_error(path: Path, info: SchedulerInfo, why: str) -> NotServingError:
    return NotServingError(
        f"{why} at {info.address}, the address in {path} (written {_when(info.created)} by "
        f"pid {info.pid} on {info.host}): the serving launch probably ended without "
        "retiring its file (cancelled, killed, node failure or time limit). Check the job "
        f"(squeue, sacct), then {_start_hint(path)}")


class _ServingFile(AddressExchange):
    """Finds a serving launch's scheduler for a client outside the launch.

    Unlike the ranks of a launch, an outsider does not wait by default: a
    missing, stopped or stale file is an error at once.  With ``wait`` it keeps
    looking that long (a job still queued, or one being restarted).
    """

    def __init__(self, path: Path, wait: float) -> None:
        self.path, self.wait = path, wait
        self.description = f"scheduler file {path}"
        self.found: SchedulerInfo | None = None

    def publish(self, info: SchedulerInfo) -> None:  # pragma: no cover - never the scheduler
        raise NotImplementedError("a client outside the launch publishes nothing")

    def lookup(self, timeout: float, stale: SchedulerInfo | None = None) -> SchedulerInfo:
        deadline = time.monotonic() + self.wait
        backoff = Backoff(first=0.05, cap=1.0)
        while True:
            try:
                info = self.found = self._usable(stale)
                return info
            except NotServingError:
                if time.monotonic() >= deadline:
                    raise
            backoff.sleep(deadline)

    def _usable(self, stale: SchedulerInfo | None) -> SchedulerInfo:
        info = serving_info(self.path)
        if stale is not None and info.nonce == stale.nonce:
            raise stale_error(self.path, info, "nobody answers")
        if info.is_dead_locally():
            raise stale_error(self.path, info, f"the scheduler process {info.pid} is gone")
        return info


class _Outside(Launcher):
    """The "launcher" of a client outside the launch: the scheduler file is all it knows."""

    name = "connect"

    def __init__(self, settings: Settings, exchange: _ServingFile) -> None:
        super().__init__(settings, {})
        self.exchange = exchange

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        return None  # only ever chosen by connect()

    def identity(self) -> Identity:
        return Identity(launcher=self.name, rank=0, size=1, launch_id="connect",
                        reasons=(f"connected from outside through {self.exchange.path}",))

    def address_exchange(self, identity: Identity) -> AddressExchange:
        return self.exchange

    def lookup_timeout(self, identity: Identity) -> float:
        # Room for one unanswered probe after the wait: a stale file must end
        # in NotServingError (say what happened), not in a startup timeout.
        return self.settings.timeout + self.exchange.wait + PROBE_TIMEOUT + 1


class OutsideSession(Session):
    """A client session whose cluster is a serving launch found through its file."""

    def __init__(self, settings: Settings, path: Path, wait: float) -> None:
        super().__init__(settings, environ={})
        self.exchange = _ServingFile(path, wait)

    def start(self, make_bridge: BridgeFactory) -> ClientBridge:
        from .client_side import ClientSide

        launcher = _Outside(self.settings, self.exchange)
        identity = launcher.identity()
        plan = self._plan = Plan(launcher, identity.reasons[0], identity, Role.CLIENT,
                                 self.exchange)
        self.role = Role.CLIENT
        self._client_side = ClientSide(self.settings, plan, make_bridge)
        return self._client_side.start()


def stop_launch(path: Path, info: SchedulerInfo, timeout: float,
                read: FileReader = read_scheduler_file) -> None:
    """Send the stop request, then wait until the scheduler has retired its file."""
    from .. import _dask
    from .._support.loop import LoopThread

    reason = f"hpcfutures stop from pid {os.getpid()} on {socket.gethostname()}"
    loop = LoopThread("hpcfutures-stop")
    try:
        accepted = loop.run_sync(_ask_to_stop(_dask, info, timeout, reason),
                                 timeout + PROBE_TIMEOUT + 1)
    except (OSError, TimeoutError) as err:
        raise stale_error(path, info, "nobody answers") from err
    finally:
        loop.stop()
    if accepted is None:
        raise stale_error(path, info, "nobody answers")
    if not accepted:
        raise NotServingError(f"the scheduler at {info.address} refused to stop: the launch "
                              f"behind {path} is not a serving launch")
    _await_retired(path, info, timeout, read)


async def _ask_to_stop(_dask: ModuleType, info: SchedulerInfo, timeout: float,
                      reason: str) -> bool | None:
    """Whether the scheduler accepted the stop; None if nobody answers at its address.

    A quick probe first: Dask retries a refused connection until its deadline,
    and a stale file should be reported in seconds, not after ``timeout``.
    """
    security = _dask.make_security(info.security)
    if not await _dask.probe(info.address, min(PROBE_TIMEOUT, timeout), security):
        return None
    return await _dask.request_stop(info.address, timeout, security, reason)


def _await_retired(path: Path, info: SchedulerInfo, timeout: float,
                   read: FileReader) -> None:
    deadline = time.monotonic() + timeout
    backoff = Backoff(first=0.02, cap=0.5)
    while True:
        try:
            current = read(path)
        except (SchedulerFileError, OSError):
            current = None  # replaced by something else: not our launch any more
        if current is None or current.finished or current.nonce != info.nonce:
            return
        if time.monotonic() >= deadline:
            raise StopTimeoutError(
                f"asked the launch behind {path} to stop, but its scheduler ({info.address}, "
                f"pid {info.pid} on {info.host}) had not finished {timeout:g} s later; check "
                "the job's output, or cancel it (scancel)")
        backoff.sleep(deadline)

