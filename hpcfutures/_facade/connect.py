"""Connecting from outside to a serving launch (``hpcfutures serve``), and stopping it.

::

    notebook / login node                          the job (hpcfutures serve)
    ─────────────────────                          ──────────────────────────
    connect(file) ── read file (yours, 0600?) ──>  scheduler file: address, TLS
                  ── ClientSide + TaskBridge ───>  scheduler  ── workers
    with-exit / shutdown ── disconnect only        keeps serving
    stop(file) / stop_allocation() ── hpcfutures_stop ──> every rank exits 0
                  <── the file turns into a "stopped" marker ──

The executor is the ordinary one: the same :class:`ClientSide` and
:class:`TaskBridge` as inside a launch, reached through a plan whose
"launcher" is the scheduler file.  Everything that can go wrong before a
connection is explained by :class:`NotServingError` or
:class:`SchedulerFileError`, saying what to do.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import NotServingError, SchedulerFileError, StopTimeoutError
from .._launch.lookup import PROBE_TIMEOUT
from .._launch.plan import Plan
from .._launch.roles import Identity, Role
from .._launch.session import Session
from .._support.backoff import Backoff
from .._support.config import Settings, resolve_settings
from .._support.options import CONNECT_KEYWORDS, given, to_seconds
from ..launchers import AddressExchange, Launcher, SchedulerInfo
from ..launchers._schedfile import read_scheduler_file
from .executor import Executor

__all__ = ["ConnectedExecutor", "connect", "stop"]


# ------------------------------------------------------------ the file
def _expand(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(os.fspath(path))))


def _start_hint(path: Path) -> str:
    return (f"start one with 'srun -n4 hpcfutures serve --scheduler-file {path}' (in an "
            "sbatch script or an allocation), or 'hpcfutures run -n 3 hpcfutures serve "
            f"--scheduler-file {path}' on this machine")


def _when(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def serving_info(path: Path) -> SchedulerInfo:
    """The published info of the serving launch behind ``path``, or why there is none.

    Does not contact the scheduler; :func:`stale_error` explains one that
    does not answer.
    """
    try:
        info = read_scheduler_file(path)
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


class _ConnectedSession(Session):
    """A client session whose cluster is a serving launch found through its file."""

    def __init__(self, settings: Settings, path: Path, wait: float) -> None:
        super().__init__(settings, environ={})
        self.exchange = _ServingFile(path, wait)

    def start(self):
        from .._launch.client_side import ClientSide

        launcher = _Outside(self.settings, self.exchange)
        identity = launcher.identity()
        plan = self._plan = Plan(launcher, identity.reasons[0], identity, Role.CLIENT,
                                 self.exchange)
        self.role = Role.CLIENT
        self._client_side = ClientSide(self.settings, plan)
        return self._client_side.start()


# ------------------------------------------------------------ the executor
class ConnectedExecutor(Executor):
    """An executor connected from outside to a serving launch (``hpcfutures serve``).

    Made by :func:`connect`.  It is the ordinary executor (``submit``, ``map``,
    real ``concurrent.futures`` futures), but leaving it (``with`` exit,
    :meth:`shutdown`) only disconnects: the launch keeps serving, and you or
    another process can connect again.  :meth:`stop_allocation` (or
    ``hpcfutures stop FILE``) ends the launch.  ``scheduler_file`` is the
    path it connected through.
    """

    def __init__(
        self,
        scheduler_file: str | os.PathLike,
        *,
        # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
        timeout: float | str | None = None,
        # END generated: connect
        wait: float | str = 0.0,
    ) -> None:
        options = given(locals(), CONNECT_KEYWORDS)
        try:
            self._wait = to_seconds(wait, zero_ok=True)
        except ValueError as err:
            raise ValueError(f"wait: {err}") from None
        self.scheduler_file = _expand(scheduler_file)
        super().__init__(**options)

    def _new_session(self, settings: Any) -> Session:
        return _ConnectedSession(settings, self.scheduler_file, self._wait)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect from the serving launch (which keeps running for other clients)."""
        super().shutdown(wait, cancel_futures=cancel_futures)

    def stop_allocation(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect, then stop the serving launch: every rank exits 0 and srun returns.

        ``wait`` and ``cancel_futures`` apply to this executor's pending
        futures, as in :meth:`shutdown`.  Returns once the launch has stopped;
        raises :class:`~hpcfutures.StopTimeoutError` if it does not confirm in time.
        """
        info = self._session.exchange.found
        super().shutdown(wait, cancel_futures=cancel_futures)
        if info is not None:
            _stop_launch(self.scheduler_file, info, self._session.settings.timeout)


def connect(
    scheduler_file: str | os.PathLike,
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    # END generated: connect
    wait: float | str = 0.0,
) -> ConnectedExecutor:
    """Connect to a serving launch from outside it: a notebook, the login node.

    Args:
        scheduler_file: The file given to ``hpcfutures serve --scheduler-file``.
            Only its owner can read it; it carries the launch's credentials.
        timeout: How long any start-up wait may take before a StartupTimeoutError. Seconds, or a
            duration such as ``"90s"``, ``"5min"`` or ``"1h"``. Default: ``60``. Environment:
            ``HPCFUTURES_TIMEOUT``.
        wait: How long to wait for the file to appear or to become usable (a
            job still queued or starting), in seconds or as a duration such as
            ``"10min"``; default 0: fail at once.

    Raises:
        NotServingError: no file, a stopped launch, nobody answering at the
            published address, or a launch that does not serve outside clients.
        SchedulerFileError: the file is not yours, or others could read it.
    """
    return ConnectedExecutor(scheduler_file, wait=wait, **given(locals(), CONNECT_KEYWORDS))


# ------------------------------------------------------------ stopping
def stop(
    scheduler_file: str | os.PathLike,
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    # END generated: connect
) -> None:
    """Stop the serving launch behind ``scheduler_file``; return once it has stopped.

    Every rank exits 0, so ``srun`` (and the job) end normally.  Clients still
    connected lose their scheduler (their executors become broken).

    Raises:
        NotServingError: nothing serves there (see :func:`connect`).
        StopTimeoutError: the launch did not confirm within ``timeout`` s.
    """
    settings = resolve_settings(given(locals(), CONNECT_KEYWORDS))
    path = _expand(scheduler_file)
    info = serving_info(path)
    if info.is_dead_locally():
        raise stale_error(path, info, f"the scheduler process {info.pid} is gone")
    _stop_launch(path, info, settings.timeout)


def _stop_launch(path: Path, info: SchedulerInfo, timeout: float) -> None:
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
    _await_retired(path, info, timeout)


async def _ask_to_stop(_dask, info: SchedulerInfo, timeout: float, reason: str) -> bool | None:
    """Whether the scheduler accepted the stop; None if nobody answers at its address.

    A quick probe first: Dask retries a refused connection until its deadline,
    and a stale file should be reported in seconds, not after ``timeout``.
    """
    security = _dask.make_security(info.security)
    if not await _dask.probe(info.address, min(PROBE_TIMEOUT, timeout), security):
        return None
    return await _dask.request_stop(info.address, timeout, security, reason)


def _await_retired(path: Path, info: SchedulerInfo, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    backoff = Backoff(first=0.02, cap=0.5)
    while True:
        try:
            current = read_scheduler_file(path)
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
