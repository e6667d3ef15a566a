"""Who does what: a process's identity in the launch, and the role that follows from it.

Pure logic, no I/O: the launcher plug-ins fill in an :class:`Identity`, and
:func:`assign_role` turns rank and size into a :class:`Role`.  Keeping this
separate makes the rules testable against a fake world in one process.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from .._errors import NotEnoughRanksError

__all__ = [
    "SCHEDULER_RANK",
    "Identity",
    "Role",
    "assign_role",
    "assign_serving_role",
    "minimum_size",
]

SCHEDULER_RANK = 0


class Role(enum.Enum):
    """What a process does for the rest of the launch."""

    SCHEDULER = "scheduler"
    CLIENT = "client"
    WORKER = "worker"
    #: The only process of the launch: runs the client, the scheduler in a
    #: thread and local worker subprocesses (the laptop default).
    STANDALONE = "standalone"


@dataclasses.dataclass(frozen=True)
class Identity:
    """Everything a launcher knows about this process.

    ``launch_id`` is unique to one launch (job + step, array job, local launch
    id) and is stamped into the scheduler file, so a file from another launch
    is never trusted.  ``fields`` feed the scheduler-file template
    (``{job_id}`` and the like).  ``reasons`` explain, for ``hpcfutures info``,
    why the launcher decided what it did.
    """

    launcher: str
    rank: int
    size: int
    launch_id: str
    single_host: bool = True
    #: How the launcher knows that the launch spans more than one host (e.g.
    #: "3 nodes in the Slurm step"); empty on one host or where nobody can
    #: tell (job arrays).  A loopback host or interface is refused then.
    several_hosts: str = ""
    local_rank: int | None = None
    threads: int | None = None
    memory_limit: str | int | None = None
    gpus: str | None = None
    #: Worker processes a standalone process starts (e.g. the CPUs a Slurm
    #: batch script was given); None: one per available core.
    local_workers: int | None = None
    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"world size must be at least 1, got {self.size}")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is outside the world of size {self.size}")


def minimum_size(scheduler_in_client: bool) -> int:
    """Processes a multi-process launch needs: scheduler, client, one worker."""
    return 2 if scheduler_in_client else 3


def client_rank(scheduler_in_client: bool) -> int:
    """The rank that keeps running the user's code."""
    return SCHEDULER_RANK if scheduler_in_client else SCHEDULER_RANK + 1


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
