"""The Flux plug-in: processes started by ``flux run -n N python job.py`` (or ``flux submit``).

The Flux job shell gives every task (flux-core's flux-environment(7))::

    FLUX_TASK_RANK      the task's global rank, from 0          -> rank
    FLUX_JOB_SIZE       the number of tasks in the job          -> size
    FLUX_TASK_LOCAL_ID  the task's rank on its node             -> local rank
    FLUX_JOB_NNODES     the nodes hosting the job's tasks       -> 1: bind to loopback
    FLUX_JOB_ID         the job id in F58 form ("ƒ2bXhy9")      -> launch id
    FLUX_JOB_ID_PATH    "/ƒA/ƒB": the ids from the outermost instance down (newer Flux)

Flux job ids are unique within an instance; the id path makes them unique
across nested instances too, so it is preferred when present. Flux is often
started inside a Slurm or LSF allocation, so its tasks also carry the outer
job's variables: this plug-in is detected before Slurm's (see
``hpcfutures.launchers``).
"""

from __future__ import annotations

from .._errors import LauncherError
from ._tasks import TaskLauncher

__all__ = ["FluxLauncher"]


class FluxLauncher(TaskLauncher):
    """Tasks of a Flux job."""

    name = "flux"
    command = "flux run"
    RANK_VAR = "FLUX_TASK_RANK"
    SIZE_VARS = ("FLUX_JOB_SIZE",)
    LOCAL_RANK_VAR = "FLUX_TASK_LOCAL_ID"
    NODES_VAR = "FLUX_JOB_NNODES"

    def launch(self) -> tuple[str, str]:
        path = self.environ.get("FLUX_JOB_ID_PATH", "").strip("/ ")
        if path:
            return path, f"launch id from FLUX_JOB_ID_PATH=/{path}"
        job = self.environ.get("FLUX_JOB_ID", "")
        if not job:
            raise LauncherError("a Flux task without FLUX_JOB_ID: cannot tell this job's "
                                "scheduler file from another's; start the script with flux run")
        return job, f"launch id from FLUX_JOB_ID={job}"
