"""The PBS plug-in (PBS Professional, OpenPBS, Torque): job arrays, ``pbsdsh`` tasks, job scripts.

::

    qsub -J 0-7 job.sh (Pro)     ARRAY  index PBS_ARRAY_INDEX, array id PBS_ARRAY_ID ("12[].srv")
    qsub -t 0-7 job.sh (Torque)  ARRAY  index PBS_ARRAYID, array id from PBS_JOBID ("12[3].srv")
    pbsdsh python job.py         TASKS  rank PBS_VNODENUM (the vnode the copy runs on), size
                                        PBS_NP or the lines of PBS_NODEFILE; PBS_TASKNUM (the
                                        TM task id) is 1 in the job script and above 1 in the
                                        tasks pbsdsh spawned
    python job.py (in job.sh)    BATCH  standalone, NCPUS (Pro) / PBS_NUM_PPN (Torque) workers
    mpiexec python job.py        the MPI plug-in's business (MPI rank variables present)

Sources: the PBS Professional and Torque user guides (PBS_ARRAY_INDEX,
PBS_ARRAY_ID, PBS_ARRAYID, PBS_JOBID, NCPUS, PBS_NUM_PPN, PBS_NP,
PBS_NODEFILE) and pbsdsh(1B) (PBS_TASKNUM, PBS_NODENUM, PBS_VNODENUM).

An array element is not told its array's range. It is taken from
``HPCFUTURES_ARRAY_INDICES`` (``qsub -J 0-7 -v HPCFUTURES_ARRAY_INDICES=0-7``)
or else asked of the server (``qstat -f``: ``array_indices_submitted`` on
PBS Professional, ``job_array_request`` on Torque). ``pbsdsh -c N`` or
``-u`` start fewer copies than vnodes: give their number in
``HPCFUTURES_SIZE``. Pending subjobs are not deleted when the client
finishes (PBS cannot delete only the queued ones of an array in one
command): they start later, find the launch over and exit 0 at once; delete
them yourself with ``qdel 'ID[]'`` if the queue is long.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .._errors import LauncherError
from ._batchenv import (
    ARRAY_INDICES_VAR,
    IndexSpan,
    int_var,
    parse_span,
    run_command,
    safe_id,
    size_override,
)
from ._identity import Identity
from ._jobarray import ArrayPosition, JobArrayLauncher, Mode

__all__ = ["PBSLauncher"]

SYSTEM = "PBS"


class PBSLauncher(JobArrayLauncher):
    """Subjobs of a PBS job array, pbsdsh tasks, or a PBS job script."""

    name = "pbs"
    system = SYSTEM
    array_example = "qsub -J 0-{last0} job.sh (Torque: qsub -t 0-{last0})"

    @classmethod
    def mode(cls, environ: Mapping[str, str]) -> Mode | None:
        if not environ.get("PBS_JOBID", ""):
            return None
        task = int_var(environ, "PBS_TASKNUM", SYSTEM)
        if task is not None and task > 1 and environ.get("PBS_VNODENUM", "") != "":
            return Mode.TASKS
        if environ.get("PBS_ARRAY_INDEX", "") or environ.get("PBS_ARRAYID", ""):
            return Mode.ARRAY
        return Mode.BATCH

    @classmethod
    def job_id(cls, environ: Mapping[str, str]) -> str:
        """The array's id for subjobs ("12[].server"), else PBS_JOBID."""
        array = environ.get("PBS_ARRAY_ID", "")
        if array:
            return array
        job = environ.get("PBS_JOBID", "")
        if environ.get("PBS_ARRAYID", ""):  # Torque: "12[3].server" -> "12[].server"
            return re.sub(r"\[\d+\]", "[]", job, count=1)
        return job

    def array_position(self) -> tuple[ArrayPosition, tuple[str, ...]]:
        env = self.environ
        index_var = "PBS_ARRAY_INDEX" if env.get("PBS_ARRAY_INDEX", "") else "PBS_ARRAYID"
        index = int_var(env, index_var, SYSTEM, required=True)
        array = self.job_id(env)
        span, source = self._span(array)
        rank = span.rank(index)
        return (ArrayPosition(safe_id(array), index, rank, span.size),
                (f"rank {rank} of {span.size} from {index_var}={index} in the range {span} "
                 f"({source})",))

    def _span(self, array: str) -> tuple[IndexSpan, str]:
        text = self.environ.get(ARRAY_INDICES_VAR, "")
        if text:
            return parse_span(text, ARRAY_INDICES_VAR), ARRAY_INDICES_VAR
        result = run_command(["qstat", "-f", array], f"ask PBS for the range of array {array}")
        match = result and re.search(r"^\s*(array_indices_submitted|job_array_request)\s*=\s*(\S+)",
                                     result.stdout, re.MULTILINE)
        if not match:
            raise LauncherError(
                f"PBS does not tell a subjob of {array} the array's index range, and "
                f"'qstat -f {array}' did not either; pass it in {ARRAY_INDICES_VAR}: "
                f"qsub -J 0-7 -v {ARRAY_INDICES_VAR}=0-7 job.sh")
        return parse_span(match[2], f"{match[1]} of 'qstat -f {array}'"), f"qstat -f: {match[1]}"

    def task_identity(self) -> Identity:
        env = self.environ
        rank = int_var(env, "PBS_VNODENUM", SYSTEM)
        size, size_source = self._task_count()
        if rank is None or not 0 <= rank < size:
            raise LauncherError(
                f"PBS_VNODENUM={rank} is not a rank among {size} pbsdsh tasks ({size_source}); "
                "if pbsdsh started fewer copies than the job has vnodes (-c, -n, -u), set "
                "HPCFUTURES_SIZE to their number")
        job = env.get("PBS_JOBID", "")  # a subjob's own id: each subjob's pbsdsh is a launch
        nodes = _unique_hosts(env.get("PBS_NODEFILE", ""))
        return Identity(
            launcher=self.name, rank=rank, size=size, launch_id=f"pbs-{safe_id(job)}.pbsdsh",
            single_host=nodes == 1, local_rank=None, threads=None,
            several_hosts=f"PBS_NODEFILE lists {nodes} hosts" if nodes > 1 else "",
            fields={"job_id": safe_id(job)},
            reasons=(f"PBS_TASKNUM={env.get('PBS_TASKNUM')}: a task pbsdsh spawned",
                     f"rank {rank} of {size} from PBS_VNODENUM and {size_source}",
                     f"launch id from PBS_JOBID={job}",
                     "one host (PBS_NODEFILE): binding to loopback" if nodes == 1 else
                     "tasks on several hosts: binding to Dask's default address"))

    def _task_count(self) -> tuple[int, str]:
        env = self.environ
        override = size_override(env)
        if override:
            return override, "HPCFUTURES_SIZE"
        size = int_var(env, "PBS_NP", SYSTEM)
        if size:
            return size, "PBS_NP"
        lines = _nodefile_lines(env.get("PBS_NODEFILE", ""))
        if lines:
            return len(lines), "the lines of PBS_NODEFILE"
        raise LauncherError("a pbsdsh task, but neither PBS_NP nor PBS_NODEFILE says how many "
                            "tasks there are; set HPCFUTURES_SIZE to their number")

    def slots(self) -> tuple[int | None, str]:
        for name in ("NCPUS", "PBS_NUM_PPN"):
            value = int_var(self.environ, name, SYSTEM)
            if value:
                return value, name
        return None, ""


def _nodefile_lines(path: str) -> list[str]:
    if not path:
        return []
    try:
        with open(path) as handle:
            return [line.strip() for line in handle if line.strip()]
    except OSError:
        return []


def _unique_hosts(path: str) -> int:
    return len(set(_nodefile_lines(path)))
