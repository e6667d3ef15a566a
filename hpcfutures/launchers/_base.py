"""The launcher plug-in contract.

A launcher answers two questions for the process it started:

1. *Who am I?* -- :meth:`Launcher.identity` returns rank, world size and a
   launch id (the role follows from those).
2. *Where is the scheduler?* -- :meth:`Launcher.address_exchange` returns the
   :class:`AddressExchange` through which the scheduler publishes its address
   and everyone else looks it up: a private file (the default) or an MPI
   broadcast.

Everything else is optional hooks with sensible defaults.  Nothing in this
module imports Dask or MPI.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import secrets
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .._launch.roles import Identity
    from .._support.config import Settings

__all__ = ["AddressExchange", "Launcher", "SchedulerInfo"]


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

    def finish(self, info: SchedulerInfo) -> None:
        """On the scheduler's process at shutdown: retract or tombstone the info."""

    def is_finished(self, info: SchedulerInfo) -> bool:
        """Whether the launch whose scheduler published ``info`` is over (cheap; polled)."""
        return False


class Launcher(abc.ABC):
    """A batch system or launcher that starts the same script N times.

    Subclasses set :attr:`name`, implement :meth:`detect` and :meth:`identity`,
    and may override :meth:`address_exchange` (default: a private scheduler
    file) and the hooks.
    """

    name: ClassVar[str]

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.environ = os.environ if environ is None else environ

    @classmethod
    @abc.abstractmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        """If this launcher started the process, say why (shown by ``info``); else None."""

    @abc.abstractmethod
    def identity(self) -> Identity:
        """Who this process is: rank, size, launch id and allocation hints."""

    def address_exchange(self, identity: Identity) -> AddressExchange:
        """How the scheduler's address travels; default: a private file."""
        from ._schedfile import SchedulerFileExchange

        return SchedulerFileExchange.for_launch(self.settings, identity)

    # ------------------------------------------------------------------ hooks
    def before_scheduler(self, identity: Identity) -> None:
        """Called on the scheduler's process just before the scheduler starts."""

    def before_worker(self, identity: Identity) -> None:
        """Called on a worker process just before its Dask worker starts."""

    def before_client(self, identity: Identity) -> None:
        """Called on the client process just before it connects."""

    def lookup_timeout(self, identity: Identity) -> float:
        """Seconds a process waits for its peers (the scheduler, the client, a first
        worker) to appear.  Job-array elements (an ``array_job_id`` field) may wait
        in the queue for hours, so they get ``array_timeout`` instead."""
        if identity.fields.get("array_job_id"):
            return self.settings.array_timeout
        return self.settings.timeout

    def client_finished(self, identity: Identity, exit_status: int) -> None:
        """Called on the client once everyone was told to stop (e.g. cancel pending array elements)."""

    def before_exit(self, identity: Identity, exit_status: int) -> None:
        """Called on a non-client rank just before it leaves the process (e.g. MPI Finalize)."""
