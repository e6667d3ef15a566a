"""Connecting from outside to a serving launch (``hpcfutures serve``), and stopping it.

The executor is the ordinary one; only how it finds its cluster differs (see
:mod:`hpcfutures._launch.outside`): leaving it disconnects, :func:`stop` ends
the launch.
"""

from __future__ import annotations

import atexit
import os
from typing import TYPE_CHECKING, Any, Literal

from ..._launch.outside import OutsideSession, expand_path, serving_info, stale_error, stop_launch
from ..._launch.session import Session
from ..._support.config import resolve_settings
from ..._support.options import CONNECT_KEYWORDS, given
from ..._support.values import to_seconds
from ..executor import Executor

if TYPE_CHECKING:
    from ..._ssh.cluster import Cluster
    from ..._ssh.openssh import SSH

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
        ssh: str | SSH | Cluster | None = None,
    ) -> None:
        options = given(locals(), CONNECT_KEYWORDS)
        try:
            self._wait = to_seconds(wait, zero_ok=True)
        except ValueError as err:
            raise ValueError(f"wait: {err}") from None
        #: The cluster reached through SSH (its file read there), or None: this machine.
        self._cluster: Cluster | None = None
        from .remote import remote_location

        remote = remote_location(scheduler_file, ssh)
        if remote is None:
            self.scheduler_file = expand_path(scheduler_file)
            super().__init__(**options)
            return
        from .remote import lost_over_ssh, open_cluster, ssh_pointer

        self._cluster = cluster = open_cluster(ssh if ssh is not None else remote[0])
        # An executor never shut down (a notebook closed) still closes the master it opened.
        atexit.register(self._release_cluster)
        try:
            self.scheduler_file = cluster.path(remote[1])
            super().__init__(**options)
        except BaseException:
            if cluster is ssh:  # allocate()'s: it still cancels its job through it
                atexit.unregister(self._release_cluster)
                self._cluster = None
            else:
                self._release_cluster()
            raise
        if self._bridge is not None:
            self._bridge.scheduler_lost_cause = lost_over_ssh(
                cluster, "the serving launch", self.scheduler_file, None)
            self._bridge.scheduler_pointer = ssh_pointer(cluster, "the serving launch")

    def _new_session(self, settings: Any) -> Session:
        self._outside: OutsideSession
        if self._cluster is not None:
            from ..._ssh.serving import SSHSession

            self._outside = SSHSession(settings, self._cluster, self.scheduler_file, self._wait)
        else:
            self._outside = OutsideSession(settings, self.scheduler_file, self._wait)
        return self._outside

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            self._after_disconnect()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect from the serving launch (which keeps running for other clients)."""
        try:
            super().shutdown(wait, cancel_futures=cancel_futures)
        finally:
            self._after_disconnect()

    def _after_disconnect(self) -> None:
        self._release_cluster()

    def _release_cluster(self) -> None:
        """Close the SSH master hpcfutures opened (forwards end with it)."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            atexit.unregister(self._release_cluster)
            cluster.close()

    def _stop_launch(self, info: Any) -> None:
        """Stop the launch found as ``info``: here, or on the cluster through SSH."""
        timeout = self._session.settings.timeout
        if self._cluster is not None:
            from ..._ssh.serving import stop_over_ssh

            stop_over_ssh(self._cluster, self.scheduler_file, info, timeout)
        else:
            stop_launch(self.scheduler_file, info, timeout)

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
        try:
            super().shutdown(wait, cancel_futures=cancel_futures)
            if info is not None:
                self._stop_launch(info)
        finally:
            self._release_cluster()


def connect(
    scheduler_file: str | os.PathLike[str],
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    journal: str | None = None,
    # END generated: connect
    wait: float | str = 0.0,
    ssh: str | SSH | None = None,
) -> ConnectedExecutor:
    """Connect to a serving launch from outside it: a notebook, the login node.

    Args:
        scheduler_file: The file given to ``hpcfutures serve --scheduler-file``.
            Only its owner can read it; it carries the launch's credentials.
            ``"cluster:~/hpcfutures-123.json"`` (as scp writes it) reads it on
            the cluster through ``ssh cluster``, and connects through a port forwarded
            over that connection: see the documentation's page on working from a laptop.
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
        ssh: The cluster the file is on, as :class:`~hpcfutures.SSH` (or a host):
            for options an scp-style path cannot carry (``python``, ``setup``).

    Raises:
        NotServingError: no file, a stopped launch, nobody answering at the
            published address, or a launch that does not serve outside clients.
        SchedulerFileError: the file is not yours, or others could read it.
        SSHError: the cluster could not be reached through ssh (login, host key,
            port forwarding).
    """
    return ConnectedExecutor(scheduler_file, wait=wait, ssh=ssh,
                             **given(locals(), CONNECT_KEYWORDS))


# ------------------------------------------------------------ stopping
def stop(
    scheduler_file: str | os.PathLike[str],
    *,
    # BEGIN generated: connect -- python -m hpcfutures._support.option_sources --write
    timeout: float | str | None = None,
    journal: str | None = None,
    # END generated: connect
    ssh: str | SSH | None = None,
) -> None:
    """Stop the serving launch behind ``scheduler_file``; return once it has stopped.

    ``"cluster:~/hpcfutures-123.json"`` (or ``ssh=``) stops one on a cluster
    through ssh, as :func:`connect` reaches it.

    Every rank exits 0, so ``srun`` (and the job) end normally.  Clients still
    connected lose their scheduler (their executors become broken).

    Raises:
        NotServingError: nothing serves there (see :func:`connect`).
        StopTimeoutError: the launch did not confirm within ``timeout`` s.
    """
    settings = resolve_settings(given(locals(), CONNECT_KEYWORDS))
    from .remote import remote_location

    remote = remote_location(scheduler_file, ssh)
    if remote is not None:
        from ..._ssh.serving import stop_over_ssh
        from .remote import open_cluster

        cluster = open_cluster(remote[0])
        try:
            stop_over_ssh(cluster, cluster.path(remote[1]), None, settings.timeout)
        finally:
            cluster.close()
        return
    path = expand_path(scheduler_file)
    info = serving_info(path)
    if info.is_dead_locally():
        raise stale_error(path, info, f"the scheduler process {info.pid} is gone")
    stop_launch(path, info, settings.timeout)
