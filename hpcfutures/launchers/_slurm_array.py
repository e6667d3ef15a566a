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
  so they do not wait in the queue only to start and exit;
* an element waiting for the scheduler asks Slurm now and then whether the
  scheduler's element (rank 0) still exists: one cancelled while pending, or
  one that failed before publishing, would otherwise keep every other element
  waiting for ``array_timeout`` (an hour by default).

A job id can come back after the cluster's state is wiped (a fresh cluster
counts from 1 again).  A tombstone written before this array was submitted
belongs to that earlier array and is ignored; ``scontrol`` is asked for the
submit time only when a tombstone is found.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .._errors import LauncherError
from ._batchenv import COMMAND_TIMEOUT, int_var, run_command
from ._schedfile import JobFileExchange, SchedulerFileExchange
from ._slurm_env import SYSTEM

__all__ = ["ArrayFileExchange", "ArrayPosition", "array_position", "cancel_pending",
           "element_gone", "job_exchange"]

#: Seconds an element waits for the scheduler before it first asks the batch system
#: whether the scheduler's element still exists, and then between two asks.  Every
#: waiting element asks, so not too often: a 1000-element array asks ~30 times a second.
ELEMENT_FIRST_CHECK = 5.0
ELEMENT_CHECK_EVERY = 30.0
#: Slurm states of an element that will never run (again): it cannot publish now.
ENDED_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "COMPLETING", "DEADLINE",
                          "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"})


@dataclasses.dataclass(frozen=True)
class ArrayPosition:
    """Where this element sits in its array."""

    job_id: str
    index: int
    rank: int
    size: int
    #: The index of rank 0, the scheduler's element (None where not known).
    first: int | None = None


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
    return ArrayPosition(job, index, (index - first) // stride, count, first)


class ArrayFileExchange(JobFileExchange):
    """The scheduler file of a job array: a job's file (:class:`JobFileExchange`), not
    waited for once the scheduler's element is gone."""

    #: How the batch system is named in messages.
    system = "Slurm"
    kind = "array"

    def __init__(self, path: Path, launch_id: str, rank: int, *, array_job_id: str,
                 scheduler_index: int | None = None,
                 submitted: Callable[[str], float | None] | None = None) -> None:
        super().__init__(path, launch_id, rank, job_id=array_job_id,
                         submitted=submitted or submit_time)
        self.array_job_id = array_job_id
        #: The array index of the scheduler's element (rank 0); None: not checked.
        self.scheduler_index = scheduler_index
        self._next_check = time.monotonic() + ELEMENT_FIRST_CHECK

    @classmethod
    def for_array(cls, settings, identity, array_job_id: str,
                  scheduler_index: int | None = None) -> ArrayFileExchange:
        plain = SchedulerFileExchange.for_launch(settings, identity)
        return cls(plain.path, identity.launch_id, identity.rank, array_job_id=array_job_id,
                   scheduler_index=scheduler_index)

    def _while_waiting(self) -> None:
        """Now and then, ask the batch system whether the scheduler's element still exists."""
        if self.scheduler_index is None or self.rank == 0 or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + ELEMENT_CHECK_EVERY
        why = self.scheduler_element_gone()
        if why is None:
            return
        raise LauncherError(
            f"the scheduler's element of job array {self.array_job_id} (index "
            f"{self.scheduler_index}, rank 0) {why}, so it will never publish its address in "
            f"{self.path}: this element (rank {self.rank}) stops now instead of waiting for it "
            "until array_timeout. Submit the array again, all of it")

    def scheduler_element_gone(self) -> str | None:
        """Why the scheduler's element will never run (again), as the batch system says;
        None while it is pending or running, or when the batch system cannot tell."""
        return element_gone(self.array_job_id, self.scheduler_index)


def job_exchange(settings, identity, job_id: str) -> JobFileExchange:
    """The scheduler file of a Slurm step or batch script (not an array): see
    :class:`JobFileExchange`."""
    plain = SchedulerFileExchange.for_launch(settings, identity)
    return JobFileExchange(plain.path, identity.launch_id, identity.rank, job_id=job_id,
                           submitted=submit_time)


def element_gone(array_job_id: str, index: int | None) -> str | None:
    """Why Slurm says element ``index`` of array ``array_job_id`` will never run (again):
    "is CANCELLED" and the like, or "is no longer known to Slurm"; None while it is
    pending or running, or if Slurm cannot be asked."""
    element = f"{array_job_id}_{index}"
    try:
        result = subprocess.run(["scontrol", "-o", "show", "job", element],
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        said = f"{result.stdout} {result.stderr}".lower()
        if "invalid job id" in said or "not found" in said:
            # An element cancelled while it waited may leave no record at all.
            return (f"is unknown to Slurm ({element} was cancelled while it waited, or "
                    "ended a while ago)")
        return None
    state = re.search(r"\bJobState=(\S+)", result.stdout)
    if state is None or state[1] not in ENDED_STATES:
        return None
    reason = re.search(r"\bReason=(\S+)", result.stdout)
    how = ", without ever starting" if "RunTime=00:00:00" in result.stdout else ""
    because = f" ({reason[1]})" if reason and reason[1] != "None" else ""
    return f"is {state[1]}{how}{because} ({element})"


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
