"""How the scheduler's address reaches the rest of its launch: the exchange contract.

The scheduler publishes a :class:`SchedulerInfo` (address, credentials, a
nonce) through an :class:`AddressExchange`; every other process looks it up.
Implementations: a private file (:mod:`._schedfile`) and an MPI broadcast
(:mod:`.mpi`).  Nothing here imports Dask or MPI.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["AddressExchange", "SchedulerInfo"]


@dataclasses.dataclass(frozen=True)
class SchedulerInfo:
    """What the scheduler tells the other processes of its launch.

    ``nonce`` changes with every scheduler start, so a reader can tell a new
    scheduler from a stale one left behind under the same launch id.
    ``security`` holds the credentials needed to connect (empty without TLS).
    ``serving`` marks a launch started with ``hpcfutures serve``: it has no
    client of its own and accepts clients from outside (``hpcfutures.connect``).
    """

    address: str
    launch_id: str
    nonce: str = dataclasses.field(default_factory=lambda: secrets.token_hex(8))
    host: str = dataclasses.field(default_factory=socket.gethostname)
    pid: int = dataclasses.field(default_factory=os.getpid)
    created: float = dataclasses.field(default_factory=time.time)
    security: Mapping[str, str] = dataclasses.field(default_factory=dict)
    finished: bool = False
    serving: bool = False
    #: The scheduler's Python minor version and hpcfutures, distributed and
    #: cloudpickle versions (empty from an hpcfutures older than the check): the
    #: client and the workers compare theirs before they connect.
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The folders the launch's processes import from (its scheduler's ``sys.path``):
    #: the client's own modules found elsewhere travel by value with its functions.
    import_path: Sequence[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"hpcfutures": 1, **dataclasses.asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> SchedulerInfo:
        data: dict[str, Any] = json.loads(text)
        if data.pop("hpcfutures", None) != 1:
            raise ValueError("not an hpcfutures scheduler file (missing version stamp)")
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})

    def is_dead_locally(self) -> bool:
        """True when the scheduler ran on this host and its process is gone."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


class AddressExchange(abc.ABC):
    """How the scheduler's address reaches the other processes of one launch."""

    #: Shown by ``hpcfutures info``: where the address travels.
    description: str = ""
    #: Whether a scheduler that stops answering has finished rather than died.
    #: True where the launcher itself ends every rank when one dies (MPI): the
    #: scheduler's process is then alive, done, and waiting for the others.
    silence_means_finished: bool = False

    @abc.abstractmethod
    def publish(self, info: SchedulerInfo) -> None:
        """On the scheduler's process: make ``info`` available to the others."""

    @abc.abstractmethod
    def lookup(self, timeout: float, stale: SchedulerInfo | None = None) -> SchedulerInfo:
        """On every other process: wait up to ``timeout`` s for the scheduler's info.

        ``stale`` is an earlier answer whose address could not be reached; the
        exchange must then wait for a different one.  Raises
        :class:`~hpcfutures.StartupTimeoutError` naming what it waited for, or
        :class:`~hpcfutures._errors.LaunchFinished` if the launch is already over.
        """

    async def lookup_async(self, timeout: float,
                           stale: SchedulerInfo | None = None) -> SchedulerInfo:
        """:meth:`lookup` from a coroutine.  An exchange that waits by polling
        overrides it to wait without blocking the event loop (a process that
        hosts many ranks, as the scale harness does, looks up for each on one
        loop); by default the loop is blocked, as one rank per process allows."""
        return self.lookup(timeout, stale)

    def finish(self, info: SchedulerInfo) -> None:
        """On the scheduler's process at shutdown: retract or tombstone the info."""

    def is_finished(self, info: SchedulerInfo) -> bool:
        """Whether the launch whose scheduler published ``info`` is over (cheap; polled)."""
        return False

