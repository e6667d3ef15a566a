"""The ``local`` launcher: the laptop default, one process that starts its own workers.

``python job.py`` runs the client here, the scheduler in a thread of the same
process and one local worker process per core (``max_workers=`` to choose).
The same script later runs unchanged under ``srun`` or ``mpiexec``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping

from .._errors import ConfigurationError
from ._base import Launcher
from ._batchenv import SIZE_VAR
from ._identity import Identity

__all__ = ["LocalLauncher", "available_cores"]


def available_cores() -> int:
    """Cores this process may run on (honours affinity masks and cgroups' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


class LocalLauncher(Launcher):
    """A single process; workers are its children."""

    def _refuse_inside_a_launch(self) -> None:
        """Forced under ``hpcfutures run``, every copy would run all the work alone."""
        size = self.environ.get(SIZE_VAR, "")
        if size.strip() not in ("", "0", "1"):
            raise ConfigurationError(
                f"launcher 'local' (the laptop default, also LocalExecutor) was asked for, but "
                f"this process is one of {size} copies started by 'hpcfutures run' "
                f"({SIZE_VAR}={size}): each copy would run all of your work on a cluster of its "
                "own. Leave the launcher unset (hpcfutures.Executor() detects 'hpcfutures run') "
                "or use launcher='run'; before 0.2 the name 'local' meant 'hpcfutures run'.")

    name = "local"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        return "no launcher variables found: running standalone (laptop default)"

    def identity(self) -> Identity:
        self._refuse_inside_a_launch()
        token = secrets.token_hex(6)
        return Identity(
            launcher=self.name,
            rank=0,
            size=1,
            launch_id=f"local-{os.getpid()}-{token}",
            single_host=True,
            fields={"job_id": token},
            reasons=("one process; the scheduler runs in it and workers are its children",),
        )
