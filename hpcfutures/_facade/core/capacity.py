"""How much memory the launch's workers have, asked of the scheduler on demand.

Tools that plan work by memory (Cubed checks its ``allowed_mem`` before it
runs anything) must compare against what a *worker* may use, not against the
client's machine: under ``srun`` the client may sit on a small node while the
workers have large ones, or the other way round.

The scheduler knows each worker's Dask memory limit (from ``memory_limit=``,
``HPCFUTURES_MEMORY_LIMIT`` or the job's memory request) and its threads.  A
worker without a limit may use its host's memory, shared with the other
workers on that host, so for those the workers themselves are asked what
their host offers (physical memory, lowered by a cgroup limit such as the one
Slurm's ``task/cgroup`` plug-in sets).

Runs on the client's loop thread; the Executor reaches it through the bridge.
"""

from __future__ import annotations

import collections
import contextlib
import socket
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["WorkerMemory", "ask_worker_memory", "host_memory"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


class WorkerMemory(NamedTuple):
    """The memory one worker may use, as the scheduler sees it.

    Attributes:
        limit: The worker's Dask memory limit in bytes; None if it has none.
        threads: Tasks the worker runs at once.
        host_share: Its threads' share of its host's memory, in bytes: what
            it may use when it has no limit (0 if the host did not answer).
    """

    limit: int | None
    threads: int
    host_share: int

    @property
    def usable(self) -> int:
        """Bytes the worker may use: its limit, else its share of the host."""
        return self.limit or self.host_share

    @property
    def per_task(self) -> int:
        """Bytes each of its concurrently running tasks may use."""
        return self.usable // max(1, self.threads)


async def ask_worker_memory(client: Client) -> dict[str, WorkerMemory]:
    """Every connected worker's memory, by address (a Dask client, on its loop)."""
    from ... import _dask

    workers = await _dask.worker_facts(client)
    if not workers:
        return {}
    hosts: dict[str, tuple[str, int] | BaseException] = {}
    if any(facts.memory_limit is None for facts in workers.values()):
        hosts = await _dask.ask_workers(client, host_memory, list(workers))
    threads_on_host: collections.Counter[str] = collections.Counter()
    for address, facts in workers.items():
        answer = hosts.get(address)
        if isinstance(answer, tuple):
            threads_on_host[answer[0]] += facts.threads
    result = {}
    for address, facts in workers.items():
        share = 0
        answer = hosts.get(address)
        if isinstance(answer, tuple):
            name, total = answer
            share = total * facts.threads // max(1, threads_on_host[name])
        result[address] = WorkerMemory(facts.memory_limit, facts.threads, share)
    return result


def host_memory() -> tuple[str, int]:
    """(host name, bytes of memory this process may use on it); runs on a worker.

    Physical memory, lowered by the tightest memory limit of the cgroups the
    process is in (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``, read up
    to the hierarchy's root, since a batch system limits the job's cgroup and
    the task sits below it).
    """
    import psutil  # a dependency of distributed; imported on the worker only

    total = psutil.virtual_memory().total
    for limit in _cgroup_limits():
        total = min(total, limit)
    return socket.gethostname(), total


def _cgroup_limits() -> list[int]:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        hierarchy, _, controllers_path = line.partition(":")
        controllers, _, path = controllers_path.partition(":")
        if hierarchy == "0" and not controllers:
            base, name = CGROUP_ROOT, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = CGROUP_ROOT / "memory", "memory.limit_in_bytes"
        else:
            continue
        directory = base / path.strip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                limits.append(int((directory / name).read_text().strip()))
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return limits
