"""A serving launch on a cluster, found and joined from outside through SSH.

The scheduler file is read on the cluster (:meth:`Cluster.read_scheduler_file`);
its address, ``tls://A:p`` on a compute node, becomes ``tls://127.0.0.1:P``,
a port the control master forwards to ``A:p`` from the login node.  TLS runs
end to end with the launch's own credentials (Dask checks the certificate, not
the host name), so the forward needs no trust of its own.  The client asks the
scheduler for results (it cannot reach the workers).

Whether a published scheduler is alive is asked on the cluster's side, with
``ssh -W`` to its address: through a forward the local port always accepts,
so a refused connection there would look like a silent one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .._errors import NotServingError, SSHError
from .._launch.outside import OutsideSession, _ServingFile, serving_info, stale_error, stop_launch
from ..launchers._exchange import SchedulerInfo
from .cluster import Cluster
from .memfiles import in_memory_files
from .openssh import Reach
from .shell import split_address

__all__ = ["SSHServingFile", "SSHSession", "forwarded", "stop_over_ssh"]


def forwarded(cluster: Cluster, info: SchedulerInfo, where: str) -> SchedulerInfo:
    """``info`` with its address replaced by a local forward to it; raises
    NotServingError when nobody listens there, SSHError when the site forbids it."""
    scheme, host, port = split_address(info.address)
    reach, said = cluster.connection.reach(host, port)
    if reach == Reach.PROHIBITED:
        raise SSHError(
            f"the login node of {cluster.target} refuses port forwarding (its sshd has "
            f"AllowTcpForwarding no, or PermitOpen excludes {host}:{port}): ssh said "
            f"{said!r}. hpcfutures reaches the job's scheduler only through a forwarded "
            "port; ask your site to allow local forwarding, or run your client on the login "
            "node (ssh in, then hpcfutures.allocate() there)")
    if reach == Reach.REFUSED:
        raise stale_error(Path(where), info, "nobody answers (asked from the login node)")
    if reach == Reach.FAILED:
        raise SSHError(f"could not reach {host}:{port} through {cluster.target}: {said}")
    local = cluster.connection.forward(host, port)
    return dataclasses.replace(info, address=f"{scheme}://127.0.0.1:{local}",
                               security=in_memory_files(info.security))


class SSHServingFile(_ServingFile):
    """The scheduler file on the cluster; what it finds is forwarded to this machine."""

    direct_to_workers = False

    def __init__(self, cluster: Cluster, path: Path, wait: float) -> None:
        super().__init__(path, wait)
        self.cluster = cluster
        self.description = f"scheduler file {cluster.target}:{path}"

    def _usable(self, stale: SchedulerInfo | None) -> SchedulerInfo:
        info = serving_info(self.path, self.cluster.read_scheduler_file)
        if stale is not None and info.nonce == stale.nonce:
            raise stale_error(self.path, info, "nobody answers")
        return forwarded(self.cluster, info, f"{self.cluster.target}:{self.path}")


class SSHSession(OutsideSession):
    """A client session whose serving launch is on the cluster behind ``cluster``."""

    def __init__(self, settings: Any, cluster: Cluster, path: Path, wait: float) -> None:
        super().__init__(settings, path, wait)
        self.exchange = SSHServingFile(cluster, path, wait)


def stop_over_ssh(cluster: Cluster, path: Path, info: SchedulerInfo | None,
                  timeout: float) -> None:
    """Stop the serving launch behind the remote ``path`` (``info``: as found, forwarded;
    None: read it now), and wait until it has retired its file."""
    if info is None:
        info = forwarded(cluster, serving_info(path, cluster.read_scheduler_file),
                         f"{cluster.target}:{path}")
    try:
        stop_launch(path, info, timeout, cluster.read_scheduler_file)
    except NotServingError:
        if not cluster.connection.alive():
            raise SSHError(f"the SSH connection to {cluster.target} was lost while stopping "
                           f"the launch behind {path}") from None
        raise
