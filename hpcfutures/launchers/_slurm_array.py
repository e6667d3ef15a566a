"""Job arrays as one launch: ``sbatch --array=0-7 job.sh``, each element running ``python job.py``.

::

    element (index - first) // step  ->  rank;   SLURM_ARRAY_TASK_COUNT  ->  size
    scheduler file keyed by SLURM_ARRAY_JOB_ID (every element's SLURM_JOB_ID differs)

Elements start whenever the queue lets them, so the array needs three things
an ``srun`` step does not:

* late elements wait longer for the scheduler (``array_timeout``) and join it;
* at the end the scheduler leaves a "finished" tombstone in the file, so an
  element that starts after the client finished exits at once with status 0;
* the client cancels the elements still pending (``scancel --state=PENDING``)
  so they do not wait in the queue only to start and exit.

A job id can come back after the cluster's state is wiped (every fresh CI
machine starts at 1).  A tombstone written before this array was submitted
belongs to that earlier array and is ignored; ``scontrol`` is asked for the
submit time only when a tombstone is found.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .._errors import LauncherError
from ._batchenv import int_var, run_command
from ._exchange import SchedulerInfo
from ._schedfile import SchedulerFileExchange
from ._slurm_env import SYSTEM

__all__ = ["ArrayFileExchange", "ArrayPosition", "array_position", "cancel_pending"]

#: Clock difference tolerated between the controller and the scheduler's node.
CLOCK_SLACK = 5.0


@dataclasses.dataclass(frozen=True)
class ArrayPosition:
    """Where this element sits in its array."""

    job_id: str
    index: int
    rank: int
    size: int


def array_position(environ: Mapping[str, str]) -> ArrayPosition:
    """Rank and size of this element, from the SLURM_ARRAY_* variables.

    The rank is counted from the array's first index, so ``--array=10-13``
    and ``--array=1-7:2`` work; an irregular list such as ``--array=0,2,3``
    cannot be mapped to ranks without asking Slurm, and is refused.
    """
    job = environ.get("SLURM_ARRAY_JOB_ID", "")
    names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
             "SLURM_ARRAY_TASK_COUNT")
    index, first, last, count = (int_var(environ, name, SYSTEM) for name in names)
    if not job or index is None or first is None or last is None or count is None:
        missing = [n for n in ("SLURM_ARRAY_JOB_ID", *names) if environ.get(n, "") == ""]
        raise LauncherError(
            f"this job array element lacks {', '.join(missing)}; is it an element of "
            "'sbatch --array=...'? (Slurm 17.11 or newer sets them)"
        )
    stride = int_var(environ, "SLURM_ARRAY_TASK_STEP", SYSTEM) or 1
    if (last - first) // stride + 1 != count or (index - first) % stride:
        raise LauncherError(
            f"job array {job} has {count} elements between indices {first} and {last}, which "
            "is not one regular range, so an element cannot work out its rank; submit it as "
            f"--array=FIRST-LAST or FIRST-LAST:STEP (e.g. --array=0-{count - 1})"
        )
    return ArrayPosition(job, index, (index - first) // stride, count)


class ArrayFileExchange(SchedulerFileExchange):
    """The scheduler file of a job array: tombstoned at the end, wary of old tombstones."""

    def __init__(self, path: Path, launch_id: str, rank: int, *, array_job_id: str) -> None:
        super().__init__(path, launch_id, rank, tombstone=True)
        self.array_job_id = array_job_id
        self._predates: dict[str, bool] = {}

    @classmethod
    def for_array(cls, settings, identity, array_job_id: str) -> ArrayFileExchange:
        plain = SchedulerFileExchange.for_launch(settings, identity)
        return cls(plain.path, identity.launch_id, identity.rank, array_job_id=array_job_id)

    def _judge(self, info: SchedulerInfo, stale: SchedulerInfo | None) -> str | None:
        if info.finished and info.launch_id == self.launch_id and self._older_than_array(info):
            return ("it is the end marker of an earlier array with the same job id "
                    "(written before this array was submitted)")
        return super()._judge(info, stale)

    def _older_than_array(self, info: SchedulerInfo) -> bool:
        if info.nonce not in self._predates:
            submitted = submit_time(self.array_job_id)
            self._predates[info.nonce] = (submitted is not None
                                          and info.created < submitted - CLOCK_SLACK)
        return self._predates[info.nonce]


def submit_time(job_id: str) -> float | None:
    """When Slurm says job ``job_id`` was submitted (epoch seconds), or None if it cannot."""
    result = run_command(["scontrol", "-o", "show", "job", job_id],
                         f"ask Slurm when job {job_id} was submitted",
                         otherwise="trusting the scheduler file's end marker",
                         env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
    if result is None:
        return None
    match = re.search(r"\bSubmitTime=(\d+)\b", result.stdout)
    return float(match[1]) if match else None


def cancel_pending(array_job_id: str) -> None:
    """Cancel the array's elements that have not started: the launch is over."""
    command = ["scancel", "--state=PENDING", array_job_id]
    run_command(command, f"cancel the pending elements of job array {array_job_id}",
                otherwise=f"cancel them yourself: {' '.join(command)}")
