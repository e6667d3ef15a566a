"""Who this process is, as a launcher tells it, and the layout every launch follows.

A launcher plug-in answers "who am I?" with an :class:`Identity`; the layout
facts (the scheduler's rank, the smallest launch) are here too because
launchers check them early, with advice in their own terms (``srun -n3``).
Which role a rank then plays is decided in :mod:`hpcfutures._launch.roles`.
Pure data, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["SCHEDULER_RANK", "Identity", "client_rank", "minimum_size"]

SCHEDULER_RANK = 0


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

