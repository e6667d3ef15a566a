"""The laptop default: no launcher, one process that starts its own workers.

``python job.py`` runs the client here, the scheduler in a thread of the same
process and one local worker process per core (``max_workers=`` to choose).
The same script later runs unchanged under ``srun`` or ``mpiexec``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping

from .._launch.roles import Identity
from ._base import Launcher

__all__ = ["EmbeddedLauncher", "available_cores"]


def available_cores() -> int:
    """Cores this process may run on (honours affinity masks and cgroups' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


class EmbeddedLauncher(Launcher):
    """A single process; workers are its children."""

    name = "embedded"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        return "no launcher variables found: running standalone (laptop default)"

    def identity(self) -> Identity:
        token = secrets.token_hex(6)
        return Identity(
            launcher=self.name,
            rank=0,
            size=1,
            launch_id=f"embedded-{os.getpid()}-{token}",
            single_host=True,
            fields={"job_id": token},
            reasons=("one process; the scheduler runs in it and workers are its children",),
        )
