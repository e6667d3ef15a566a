"""The facade's side of ``ssh=``: a cluster opened for allocate() and connect(), and
the job those submit there (its script written, its output read, on the cluster).

::

    allocate(..., ssh="cluster")            connect("cluster:~/f.json")
        open_cluster: log in (or reuse the master), home, batch system
        RemoteAllocation: script written there, sbatch/squeue/scancel there
        SSHSession: scheduler file read there, its port forwarded here
        leaving: stop the launch, cancel what is left, close the master we opened
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..._errors import NotServingError
from ..._ssh.cluster import Cluster, RemoteBatch
from ..._ssh.openssh import SSH, InterruptedAfter
from ..._ssh.shell import split_remote
from ...launchers._exchange import SchedulerInfo
from .batchjob import Allocation

__all__ = ["RemoteAllocation", "lost_over_ssh", "open_cluster", "remote_location", "ssh_pointer"]

logger = logging.getLogger("hpcfutures")


def open_cluster(ssh: str | SSH | Cluster) -> Cluster:
    """A cluster logged in to (an open one is taken as it is)."""
    return ssh if isinstance(ssh, Cluster) else Cluster(ssh).open()


def remote_location(location: object, ssh: str | SSH | Cluster | None
                    ) -> tuple[str | SSH | Cluster, str] | None:
    """(target, path) when ``location`` is on a cluster: ``ssh=`` given, or scp-style
    ``"cluster:~/f.json"``; None for a local path."""
    if ssh is not None:
        path = str(location)
        scp_style = split_remote(path) if isinstance(location, str) else None
        if scp_style is not None:
            # The same cluster named twice is one place; two clusters are a mistake.
            target = ssh if isinstance(ssh, str) else ssh.target
            if scp_style[0] != target:
                raise ValueError(
                    f"{path!r} names the cluster {scp_style[0]!r}, but ssh= names "
                    f"{target!r}: give the path on the cluster alone with ssh= "
                    f"({scp_style[1]!r}), or the scp-style path without ssh=")
            path = scp_style[1]
        return ssh, path
    if isinstance(location, str):
        return split_remote(location)
    return None


class RemoteAllocation(Allocation):
    """A job submitted on a cluster through SSH: its script is written there, next to
    its output, and its output read from there."""

    @property
    def cluster(self) -> Cluster:
        system = self.system
        assert isinstance(system, RemoteBatch)
        return system.cluster

    def __str__(self) -> str:
        return f"{self.system.title} job {self.job} on {self.cluster.target}"

    def submit(self) -> str:
        self.cluster.write(self.script_path, self.script, mode=0o700)
        try:
            self.job = self.system.submit(str(self.script_path))
        except InterruptedAfter as stop:  # a Ctrl-C during sbatch: allocate cancels it
            self.job = stop.job
            raise KeyboardInterrupt from None
        logger.info("submitted %s (script %s, output %s)", self, self.script_path, self.output)
        return self.job

    def read_scheduler_file(self, path: Path) -> SchedulerInfo | None:
        return self.cluster.read_scheduler_file(path)

    def leave_queue(self, grace: float) -> None:
        """As for a local job, while the SSH connection lasts; without it the job cannot
        be asked or cancelled, and ends by itself (its idle timeout) instead."""
        if not self.cluster.connection.alive():
            logger.warning("the SSH connection to %s is gone, so %s could not be stopped from "
                           "here: it ends by itself once it has had no client for its "
                           "idle_timeout", self.cluster.target, self)
            return
        super().leave_queue(grace)

    def output_tail(self, lines: int = 15) -> str:
        return self.cluster.tail(self.output, lines)


def ssh_pointer(cluster: Cluster, what: str) -> str:
    """What the executor's broken message says after the scheduler's address."""
    return (f"{what}, reached through the SSH connection to {cluster.target}; if that "
            "connection broke, the job still serves for a while and can be connected to "
            "again (the cause below says how)")


def lost_over_ssh(cluster: Cluster, what: str, scheduler_file: Path,
                  idle_timeout: float | None, output: Path | None = None) -> NotServingError:
    """The cause given to futures when the scheduler can no longer be reached: the
    SSH connection broke, or the job ended; both are said, with how to go on."""
    where = f"{cluster.target}:{scheduler_file}"
    keeps = (f"it keeps serving until it has had no client for idle_timeout={idle_timeout:g} s"
             if idle_timeout is not None else "it keeps serving (it has no idle timeout: "
             f"stop it with hpcfutures.stop({where!r}) or cancel it)")
    return NotServingError(
        f"{what} can no longer be reached through the SSH connection to {cluster.target}. "
        "Either that connection was lost (the laptop slept, the network changed, the ssh "
        f"master ended): then the job still runs and {keeps}; hpcfutures.connect({where!r}) "
        "connects to it again. Or the job ended (cancelled, failed, time limit)"
        + (f": its output is {cluster.target}:{output}" if output is not None else ""))
