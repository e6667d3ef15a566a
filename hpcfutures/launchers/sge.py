"""The Grid Engine plug-in (Son of Grid Engine, Univa/Altair, Open Cluster Scheduler): job arrays.

::

    qsub -t 1-8 job.sh          ARRAY  rank (SGE_TASK_ID - SGE_TASK_FIRST) / SGE_TASK_STEPSIZE,
                                       size from SGE_TASK_FIRST/LAST/STEPSIZE;
                                       file keyed by JOB_ID (the same for every task)
    qsub job.sh                 BATCH  SGE_TASK_ID is the string "undefined": one process,
                                       standalone, NSLOTS local workers
    qsub -pe mpi 4 job.sh       an mpiexec inside is the MPI plug-in's business (PMI_RANK or
      (mpiexec python job.py)   OMPI_COMM_WORLD_RANK beside JOB_ID); see hpcfutures.launchers

``NSLOTS`` (``-pe smp N``) gives each array element's worker its threads.
Checked on Debian's gridengine 8.1.9 (the project's ci/sge-up.sh cluster):
task ids are 1-based, and every job sees ``SGE_TASK_*`` -- non-array jobs
with the value ``undefined``.

When the client finishes it deletes the array's tasks that are still pending
(``qstat -s p`` then ``qdel JOB -t RANGE``, as the job's owner). A task that
starts between the two commands is deleted while it starts up, which costs
nothing: it would have found the launch over and exited.

Job numbers start again at 1 on a fresh cluster, so a tombstone left in the
scheduler file by an earlier array with the same number must not end this
one: as for Slurm, a tombstone older than the array's submission time
(``qstat -j JOB -xml``) is ignored.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from .._errors import LauncherError
from ._batchenv import COMMAND_TIMEOUT, int_var, parse_int, parse_span, run_command
from ._exchange import AddressExchange
from ._identity import Identity
from ._jobarray import ArrayPosition, JobArrayLauncher, Mode
from ._slurm_array import ArrayFileExchange

__all__ = ["SGELauncher"]

SYSTEM = "Grid Engine"


class SGELauncher(JobArrayLauncher):
    """Tasks of a Grid Engine job array, or a Grid Engine job script."""

    name = "sge"
    system = SYSTEM
    array_example = "qsub -t 1-{n} job.sh"

    @classmethod
    def mode(cls, environ: Mapping[str, str]) -> Mode | None:
        if not environ.get("JOB_ID", "") or not environ.get("SGE_TASK_ID", ""):
            return None
        return Mode.BATCH if environ["SGE_TASK_ID"] == "undefined" else Mode.ARRAY

    @classmethod
    def job_id(cls, environ: Mapping[str, str]) -> str:
        return environ.get("JOB_ID", "")

    def array_position(self) -> tuple[ArrayPosition, tuple[str, ...]]:
        env = self.environ
        index = int_var(env, "SGE_TASK_ID", SYSTEM)
        names = ("SGE_TASK_FIRST", "SGE_TASK_LAST", "SGE_TASK_STEPSIZE")
        first, last, step = (int_var(env, name, SYSTEM) for name in names)
        if index is None or first is None or last is None:
            raise LauncherError(
                "a Grid Engine array task without SGE_TASK_FIRST/SGE_TASK_LAST: is this "
                "really a task of 'qsub -t FIRST-LAST'?")
        span = parse_span(f"{first}-{last}:{step or 1}", "SGE_TASK_FIRST-LAST:STEPSIZE")
        rank = span.rank(index)
        job = self.job_id(env)
        return (ArrayPosition(job, index, rank, span.size, span.first),
                (f"rank {rank} of {span.size} from SGE_TASK_ID={index} in the array's "
                 f"range {span} (SGE_TASK_FIRST, SGE_TASK_LAST, SGE_TASK_STEPSIZE)",))

    def slots(self) -> tuple[int | None, str]:
        """``NSLOTS``; for a job spread over hosts, this host's share from ``PE_HOSTFILE``."""
        slots = int_var(self.environ, "NSLOTS", SYSTEM)
        hosts = int_var(self.environ, "NHOSTS", SYSTEM)
        if slots is None or hosts in (None, 1):
            return slots, "NSLOTS"
        here = _first_host_slots(self.environ.get("PE_HOSTFILE", ""))
        return (here, "PE_HOSTFILE (this host's slots)") if here else (slots, "NSLOTS")

    def address_exchange(self, identity: Identity) -> AddressExchange:
        array_job = identity.fields.get("array_job_id")
        if array_job:
            return SGEArrayExchange.for_array(self.settings, identity, array_job,
                                              self.array_position()[0].first)
        return super().address_exchange(identity)

    def cancel_pending(self, array_job_id: str) -> None:
        for tasks in pending_tasks(array_job_id):
            run_command(["qdel", array_job_id, "-t", tasks],
                        f"delete the pending tasks {tasks} of Grid Engine job {array_job_id}")


class SGEArrayExchange(ArrayFileExchange):
    """Slurm's array file exchange, asking Grid Engine when the array was submitted and
    whether the scheduler's task is still pending or running."""

    system = SYSTEM

    def __init__(self, path: Path, launch_id: str, rank: int, *, array_job_id: str,
                 scheduler_index: int | None = None) -> None:
        super().__init__(path, launch_id, rank, array_job_id=array_job_id,
                         scheduler_index=scheduler_index, submitted=submission_time)

    def scheduler_element_gone(self) -> str | None:
        return task_gone(self.array_job_id, self.scheduler_index)

def _first_host_slots(path: str) -> int | None:
    """Slots of the first line of a PE_HOSTFILE ("host slots queue processors"): the master
    host's; None when the file cannot be read here (then NSLOTS is used)."""
    try:
        with open(path) as handle:
            fields = handle.readline().split()
        return parse_int(fields[1], f"the slot count in PE_HOSTFILE={path}", SYSTEM)
    except (OSError, IndexError, LauncherError):
        return None


def submission_time(job_id: str) -> float | None:
    """When Grid Engine says job ``job_id`` was submitted (epoch seconds), or None."""
    result = run_command(["qstat", "-j", job_id, "-xml"],
                         f"ask Grid Engine when job {job_id} was submitted")
    if result is None:
        return None
    try:
        node = ET.fromstring(result.stdout).find(".//JB_submission_time")
        stamp = float(node.text) if node is not None and node.text else None
    except (ET.ParseError, ValueError):
        return None
    if stamp is not None and stamp > 1e11:  # some versions count milliseconds
        stamp /= 1000
    return stamp


def task_gone(job_id: str, task: int | None) -> str | None:
    """Why task ``task`` of job ``job_id`` will never run (again): it is neither pending
    nor running (nor suspended) in ``qstat``; None while it is, or if qstat cannot be asked.

    Grid Engine forgets a task once it ended or was deleted (``qacct`` would know
    which, much later), so "gone" is all it can say."""
    try:
        result = subprocess.run(["qstat", "-xml"], capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT)
        root = ET.fromstring(result.stdout) if result.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ET.ParseError):
        return None
    if root is None or task is None:
        return None
    for job in root.iter("job_list"):
        if (job.findtext("JB_job_number") or "").strip() != job_id:
            continue
        for part in (job.findtext("tasks") or "").split(","):
            try:
                if part.strip() and parse_span(part, "qstat's task range").has(task):
                    return None
            except LauncherError:
                return None  # a listing hpcfutures cannot read: do not guess
    return (f"is no longer pending or running in Grid Engine (task {job_id}.{task}: deleted "
            "while it waited, or it ended before the scheduler started)")


def pending_tasks(job_id: str) -> list[str]:
    """Task ranges ("3-5:1", "7") of job ``job_id`` that are still pending, held ones included."""
    result = run_command(["qstat", "-s", "p", "-xml"],
                         f"list the pending tasks of Grid Engine job {job_id}")
    if result is None:
        return []
    try:
        root = ET.fromstring(result.stdout)
    except ET.ParseError:
        return []
    ranges = []
    for job in root.iter("job_list"):
        if (job.findtext("JB_job_number") or "").strip() == job_id:
            tasks = (job.findtext("tasks") or "").strip()
            ranges += [part for part in tasks.split(",") if part]
    return ranges
