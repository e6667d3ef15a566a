"""Connecting from outside to a serving launch (``hpcfutures serve``), and stopping it.

The executor is the ordinary one; only how it finds its cluster differs (see
:mod:`hpcfutures._launch.outside`): leaving it disconnects, :func:`stop` ends
the launch.
"""

from __future__ import annotations

import os
from typing import Any

from ..._launch.outside import OutsideSession, expand_path, serving_info, stale_error, stop_launch
from ..._launch.session import Session
from ..._support.config import resolve_settings
from ..._support.options import CONNECT_KEYWORDS, given
from ..._support.values import to_seconds
from ..executor import Executor

__all__ = ["ConnectedExecutor", "connect", "stop"]


















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
        scheduler_file: str | os.PathLike[str],
        *,
        # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
        timeout: float | str | None = None,
        journal: str | None = None,
        # END generated: connect
        wait: float | str = 0.0,
    ) -> None:
        options = given(locals(), CONNECT_KEYWORDS)
        try:
            self._wait = to_seconds(wait, zero_ok=True)
        except ValueError as err:
            raise ValueError(f"wait: {err}") from None
        self.scheduler_file = expand_path(scheduler_file)
        super().__init__(**options)

    def _new_session(self, settings: Any) -> Session:
        self._outside = OutsideSession(settings, self.scheduler_file, self._wait)
        return self._outside

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect from the serving launch (which keeps running for other clients)."""
        super().shutdown(wait, cancel_futures=cancel_futures)

    def _expected_workers(self) -> int | None:
        """Not known from outside: needs are checked against the workers present."""
        return None

    def stop_allocation(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect, then stop the serving launch: every rank exits 0 and srun returns.

        ``wait`` and ``cancel_futures`` apply to this executor's pending
        futures, as in :meth:`shutdown`.  Returns once the launch has stopped;
        raises :class:`~hpcfutures.StopTimeoutError` if it does not confirm in time.
        """
        info = self._outside.exchange.found
        super().shutdown(wait, cancel_futures=cancel_futures)
        if info is not None:
            stop_launch(self.scheduler_file, info, self._session.settings.timeout)


def connect(
    scheduler_file: str | os.PathLike[str],
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    journal: str | None = None,
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
        journal: Directory where each finished call's result is recorded, on a filesystem that
            later runs see; a later run with the same journal returns the recorded results
            instead of running those calls again. May use ``{job_id}`` and ``{user}`` like
            ``scheduler_file``. See the documentation's page on time limits and resuming.
            Default: none (nothing is recorded). Environment: ``HPCFUTURES_JOURNAL``.
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
    scheduler_file: str | os.PathLike[str],
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    journal: str | None = None,
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
    path = expand_path(scheduler_file)
    info = serving_info(path)
    if info.is_dead_locally():
        raise stale_error(path, info, f"the scheduler process {info.pid} is gone")
    stop_launch(path, info, settings.timeout)






