"""Who does what: the role that follows from a process's rank in the launch.

Pure logic, no I/O: the launcher plug-ins fill in an
:class:`~hpcfutures.launchers.Identity`, and :func:`assign_role` turns its rank
and size into a :class:`Role`.  Keeping this separate makes the rules testable
against a fake world in one process.
"""

from __future__ import annotations

import enum

from .._errors import NotEnoughRanksError
from ..launchers._identity import SCHEDULER_RANK, client_rank, minimum_size

__all__ = ["Role", "assign_role", "assign_serving_role"]



class Role(enum.Enum):
    """What a process does for the rest of the launch."""

    SCHEDULER = "scheduler"
    CLIENT = "client"
    WORKER = "worker"
    #: The only process of the launch: runs the client, the scheduler in a
    #: thread and local worker subprocesses (the laptop default).
    STANDALONE = "standalone"








def assign_role(rank: int, size: int, scheduler_in_client: bool) -> Role:
    """The role of ``rank`` in a launch of ``size`` processes.

    Rank 0 runs the scheduler, rank 1 the client, the rest are workers; with
    ``scheduler_in_client`` rank 0 is both scheduler and client.  A launch of
    one process runs everything locally, as on a laptop.
    """
    if size == 1:
        return Role.STANDALONE
    needed = minimum_size(scheduler_in_client)
    if size < needed:
        layout = (
            "a client (which also runs the scheduler) and at least one worker"
            if scheduler_in_client
            else "a scheduler, a client and at least one worker"
        )
        hint = "" if scheduler_in_client else (
            " or pass scheduler_in_client=True (HPCFUTURES_SCHEDULER_IN_CLIENT=1) to need only 2"
        )
        raise NotEnoughRanksError(
            f"this launch has {size} processes but hpcfutures needs at least {needed}: "
            f"{layout}. Launch more tasks (e.g. srun -n{needed}){hint}."
        )
    if rank == client_rank(scheduler_in_client):
        return Role.CLIENT
    if rank == SCHEDULER_RANK:
        return Role.SCHEDULER
    return Role.WORKER


def assign_serving_role(rank: int, size: int) -> Role:
    """The role of ``rank`` in a serving launch (``hpcfutures serve``) of ``size`` processes.

    Nobody runs user code there, so no rank is the client: rank 0 runs the
    scheduler and every other rank is a worker.  One process serves on its
    own, with local worker processes (a laptop, or a batch script without srun).
    """
    if size == 1:
        return Role.STANDALONE
    return Role.SCHEDULER if rank == SCHEDULER_RANK else Role.WORKER
