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
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from ._exchange import AddressExchange
from ._schedfile import SchedulerFileExchange

if TYPE_CHECKING:
    from .._support.config import Settings
    from ._identity import Identity

__all__ = ["Launcher"]






class Launcher(abc.ABC):
    """A batch system or launcher that starts the same script N times.

    Subclasses set :attr:`name`, implement :meth:`detect` and :meth:`identity`,
    and may override :meth:`address_exchange` (default: a private scheduler
    file) and the hooks.
    """

    name: ClassVar[str]
    #: Whether the launcher's own status reports every rank's (srun returns the highest
    #: of its tasks'): then a worker rank that a call killed decides it, whatever the
    #: client does.  ``hpcfutures run`` returns the client's.
    reports_every_rank: ClassVar[bool] = True

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
        return SchedulerFileExchange.for_launch(self.settings, identity)

    # ------------------------------------------------------------------ hooks
    def before_scheduler(self, identity: Identity) -> None:
        """Called on the scheduler's process just before the scheduler starts."""

    def before_worker(self, identity: Identity) -> None:
        """Called on a worker process just before its Dask worker starts."""

    def worker_joined(self, identity: Identity) -> None:
        """Called on a worker once it has joined the scheduler (it now serves the launch)."""

    def before_client(self, identity: Identity) -> None:
        """Called on the client process just before it connects."""

    def lookup_timeout(self, identity: Identity) -> float:
        """Seconds a process waits for its peers (the scheduler, the client, a first
        worker) to appear.  Job-array elements (an ``array_job_id`` field) may wait
        in the queue for hours, so they get ``array_timeout`` instead."""
        if identity.fields.get("array_job_id"):
            return self.settings.array_timeout
        return self.settings.timeout

    def client_finished(self, identity: Identity, exit_status: int,
                        crashed: int | None = None) -> None:
        """Called on the client once everyone was told to stop (e.g. cancel pending array
        elements).

        ``exit_status``: how the client's ``with`` block ended (0; 1 for an
        exception, which the program may still catch; a ``SystemExit`` code).
        The other ranks end with 0 either way: the client's process status is
        the launch's.  ``crashed``: the exit status of a worker rank that a call
        killed during the launch, if any.
        """

    def before_exit(self, identity: Identity, exit_status: int) -> None:
        """Called on a non-client rank just before it leaves the process (e.g. MPI Finalize)."""
