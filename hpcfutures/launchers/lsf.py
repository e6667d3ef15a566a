"""The LSF plug-ins: job arrays and job scripts (``lsf``), and ``jsrun`` tasks (``jsrun``).

::

    bsub -J 'run[1-8]' job.sh    ARRAY  index LSB_JOBINDEX, range 1..LSB_JOBINDEX_END by
                                        LSB_JOBINDEX_STEP; file keyed by LSB_JOBID (the
                                        same for every element of an LSF array)
    python job.py (in job.sh)    BATCH  LSB_JOBINDEX is 0 outside arrays: standalone, with
                                        this host's slots of LSB_MCPU_HOSTS as local workers
    jsrun -n 8 python job.py     jsrun  rank JSM_NAMESPACE_RANK of JSM_NAMESPACE_SIZE
    mpirun python job.py         the MPI plug-in's business (MPI rank variables present)

Sources: IBM Spectrum LSF 10.1 "Environment variables set for job
execution" (LSB_JOBID, LSB_JOBINDEX -- 0 for non-array jobs, LSB_MCPU_HOSTS,
LSB_DJOB_NUMPROC), the LSB_JOBINDEX_END/LSB_JOBINDEX_STEP pair LSF sets in
array elements (MPICH's LSF bootstrap lists them among LSF's own), bkill(1)
(``-stat pend``) and the jsrun variables (JSM_NAMESPACE_RANK,
JSM_NAMESPACE_SIZE, JSM_NAMESPACE_LOCAL_RANK) that PyTorch Lightning's
LSFEnvironment documents.

LSF does not tell an element where its array starts. Array indices start at
1 by default in LSF, so hpcfutures assumes ``[1-END]`` (with the step); an
array that starts elsewhere (``'run[5-12]'``) must say so in
``HPCFUTURES_ARRAY_INDICES=5-12`` (LSF passes the submitting shell's
environment on). When the client finishes, the array's pending elements are
killed with ``bkill -stat pend``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import LauncherError
from ._batchenv import (
    ARRAY_INDICES_VAR,
    IndexSpan,
    int_var,
    parse_int,
    parse_span,
    run_command,
)
from ._jobarray import ArrayPosition, JobArrayLauncher, Mode
from ._tasks import TaskLauncher

__all__ = ["JsrunLauncher", "LSFLauncher"]

SYSTEM = "LSF"


class LSFLauncher(JobArrayLauncher):
    """Elements of an LSF job array, or an LSF job script."""

    name = "lsf"
    system = SYSTEM
    array_example = "bsub -J 'name[1-{n}]' job.sh"

    @classmethod
    def mode(cls, environ: Mapping[str, str]) -> Mode | None:
        if not environ.get("LSB_JOBID", ""):
            return None
        index = int_var(environ, "LSB_JOBINDEX", SYSTEM)
        return Mode.ARRAY if index else Mode.BATCH

    @classmethod
    def job_id(cls, environ: Mapping[str, str]) -> str:
        return environ.get("LSB_JOBID", "")

    def array_position(self) -> tuple[ArrayPosition, tuple[str, ...]]:
        env = self.environ
        index = int_var(env, "LSB_JOBINDEX", SYSTEM, required=True)
        span, source = self._span()
        rank = span.rank(index)
        return (ArrayPosition(self.job_id(env), index, rank, span.size),
                (f"rank {rank} of {span.size} from LSB_JOBINDEX={index} in the range {span} "
                 f"({source})",))

    def _span(self) -> tuple[IndexSpan, str]:
        env = self.environ
        text = env.get(ARRAY_INDICES_VAR, "")
        if text:
            return parse_span(text, ARRAY_INDICES_VAR), ARRAY_INDICES_VAR
        end = int_var(env, "LSB_JOBINDEX_END", SYSTEM)
        step = int_var(env, "LSB_JOBINDEX_STEP", SYSTEM) or 1
        if end is None:
            raise LauncherError(
                "an LSF array element without LSB_JOBINDEX_END, so its array's range is "
                f"unknown; pass it in {ARRAY_INDICES_VAR} (e.g. {ARRAY_INDICES_VAR}=1-8)")
        last = end - (end - 1) % step  # the last index the array really has
        return (IndexSpan(1, last, step),
                "LSB_JOBINDEX_END and LSB_JOBINDEX_STEP, starting at LSF's default first "
                f"index 1; set {ARRAY_INDICES_VAR} if the array starts elsewhere")

    def slots(self) -> tuple[int | None, str]:
        """This host's slots: the first pair of LSB_MCPU_HOSTS ("hostA 4 hostB 4"), where the
        job script and an array element run; else LSB_DJOB_NUMPROC."""
        text = self.environ.get("LSB_MCPU_HOSTS", "")
        pairs = text.split()
        if len(pairs) >= 2:
            return (parse_int(pairs[1], f"the slot count {pairs[1]!r} in LSB_MCPU_HOSTS={text!r}",
                              SYSTEM), "LSB_MCPU_HOSTS (this host's slots)")
        return int_var(self.environ, "LSB_DJOB_NUMPROC", SYSTEM), "LSB_DJOB_NUMPROC"

    def cancel_pending(self, array_job_id: str) -> None:
        run_command(["bkill", "-stat", "pend", array_job_id],
                    f"kill the pending elements of LSF job array {array_job_id}")


class JsrunLauncher(TaskLauncher):
    """Tasks started by IBM Job Step Manager's ``jsrun`` inside an LSF job."""

    name = "jsrun"
    command = "jsrun"
    RANK_VAR = "JSM_NAMESPACE_RANK"
    SIZE_VARS = ("JSM_NAMESPACE_SIZE",)
    LOCAL_RANK_VAR = "JSM_NAMESPACE_LOCAL_RANK"

    def launch(self) -> tuple[str, str]:
        """The step's PMIx namespace (one per jsrun), else the LSF job id."""
        namespace = self.environ.get("PMIX_NAMESPACE", "")
        if namespace:
            return namespace, f"launch id from PMIX_NAMESPACE={namespace} (one per jsrun step)"
        job = self.environ.get("LSB_JOBID", "")
        if not job:
            raise LauncherError("a jsrun task without PMIX_NAMESPACE or LSB_JOBID: cannot tell "
                                "this launch's scheduler file from another's")
        return (f"{job}.jsrun", f"launch id from LSB_JOBID={job}; two jsrun steps running at "
                "once in one job need different scheduler_file= paths")
