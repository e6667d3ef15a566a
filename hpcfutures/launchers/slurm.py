"""The Slurm plug-in: ``srun`` steps, the batch script itself, and job arrays.

::

    srun -n4 python job.py        STEP   rank SLURM_PROCID of SLURM_STEP_NUM_TASKS;
                                         file keyed by job id + step id
    python job.py  (in sbatch)    BATCH  one process whatever SLURM_NTASKS says:
                                         standalone, local workers on this node's CPUs
    sbatch --array=0-7 job.sh     ARRAY  rank from SLURM_ARRAY_TASK_ID (see _slurm_array)

Why the batch script runs standalone rather than failing: it is what a user
who writes ``python job.py`` in a one-node batch script means, and the same
script then runs unchanged on a laptop.  ``hpcfutures info`` says so, and a
warning says that the other nodes of a multi-node job stay idle unless the
script is started with ``srun``.

Per worker: threads from ``SLURM_CPUS_PER_TASK``, a memory limit from
``SLURM_MEM_PER_CPU``/``SLURM_MEM_PER_NODE``, one GPU by local rank;
explicit options (``threads_per_worker=``, ``memory_limit=``...) win.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from .._errors import LauncherError, NotEnoughRanksError
from ._base import Launcher
from ._batchenv import int_var
from ._exchange import AddressExchange
from ._identity import Identity, minimum_size
from ._slurm_array import ArrayFileExchange, array_position, cancel_pending, job_exchange
from ._slurm_env import (
    SYSTEM,
    Mode,
    cpus_per_task,
    foreign_mpi_launch,
    in_srun_step,
    launch_mode,
    memory_per_task,
    step_size,
    tasks_on_this_node,
)
from .local import available_cores

__all__ = ["SlurmLauncher"]

logger = logging.getLogger("hpcfutures")


class SlurmLauncher(Launcher):
    """Processes started by Slurm: ``srun`` tasks, a batch script, job array elements."""

    name = "slurm"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        job = environ.get("SLURM_JOB_ID", "")
        if not job:
            return None
        try:
            if foreign_mpi_launch(environ):
                return None  # mpiexec inside the job: the MPI plug-in knows the ranks
            mode = launch_mode(environ)
        except LauncherError:
            return f"SLURM_JOB_ID={job} is set"  # identity() explains what is wrong
        if mode is Mode.STEP:
            return (f"SLURM_STEP_ID is set: task {environ.get('SLURM_PROCID')} of srun step "
                    f"{job}.{environ.get('SLURM_STEP_ID')}")
        if mode is Mode.ARRAY:
            return (f"SLURM_ARRAY_JOB_ID is set: element {environ.get('SLURM_ARRAY_TASK_ID')} "
                    f"of job array {environ.get('SLURM_ARRAY_JOB_ID')}")
        return (f"SLURM_JOB_ID={job} is set but SLURM_STEP_ID is not: the job's batch script "
                "(or an salloc shell), a single process")

    # ---------------------------------------------------------------- identity
    def identity(self) -> Identity:
        job = self.environ.get("SLURM_JOB_ID", "")
        if not job:
            raise LauncherError(
                "SlurmExecutor needs a Slurm job, but SLURM_JOB_ID is not set; start the "
                "script with srun or sbatch, or use hpcfutures.Executor() to detect the launcher"
            )
        foreign = foreign_mpi_launch(self.environ)
        if foreign:
            raise LauncherError(
                f"{foreign} inside Slurm job {job}, so Slurm's task numbers are not the ranks; "
                "use MPIExecutor (launcher='mpi'), or start the script with srun"
            )
        mode = launch_mode(self.environ)
        if mode is Mode.ARRAY:
            return self._array_identity()
        if mode is Mode.STEP:
            return self._step_identity(job)
        return self._batch_identity(job)

    def _step_identity(self, job: str) -> Identity:
        env = self.environ
        step = str(int_var(env, "SLURM_STEP_ID", SYSTEM))
        rank = int_var(env, "SLURM_PROCID", SYSTEM, required=True)
        size = step_size(env)
        if size is None:
            raise LauncherError("an srun task without SLURM_STEP_NUM_TASKS or SLURM_NTASKS: "
                                "cannot tell how many tasks the step has")
        nodes = (int_var(env, "SLURM_STEP_NUM_NODES", SYSTEM)
                 or int_var(env, "SLURM_NNODES", SYSTEM) or 1)
        return self._identity(
            rank, size, launch_id=_launch_id(env, f"{job}.{step}"), single_host=nodes == 1,
            several_hosts=f"{nodes} nodes in the Slurm step" if nodes > 1 else "",
            fields=_fields(env, job, step),
            reasons=(f"rank {rank} of {size} from SLURM_PROCID/SLURM_STEP_NUM_TASKS",
                     f"launch id from SLURM_JOB_ID={job} and SLURM_STEP_ID={step}",
                     f"{nodes} node(s) in the step (SLURM_STEP_NUM_NODES)"))

    def _batch_identity(self, job: str) -> Identity:
        env = self.environ
        tasks = int_var(env, "SLURM_NTASKS", SYSTEM)
        nodes = int_var(env, "SLURM_JOB_NUM_NODES", SYSTEM) or 1
        if nodes > 1:
            logger.warning(
                "hpcfutures runs in the batch script of Slurm job %s without srun: only this "
                "node's CPUs are used and the job's other %d node(s) stay idle; start the "
                "script with 'srun python ...' to use the whole allocation", job, nodes - 1)
        note = (f"SLURM_NTASKS={tasks} counts the tasks srun would start, but without srun "
                "only this process exists" if tasks and tasks > 1 else
                "no srun step: this process is the only one")
        return self._identity(
            0, 1, launch_id=_launch_id(env, f"{job}.batch-{os.getpid()}"), single_host=True,
            fields=_fields(env, job, "batch"),
            reasons=(note, "running standalone: scheduler in this process, local workers "
                     "on this node's CPUs (SLURM_CPUS_ON_NODE); use srun for one rank per task"))

    def _array_identity(self) -> Identity:
        env = self.environ
        where = array_position(env)
        colocated = self.settings.scheduler_in_client
        needed = minimum_size(colocated)
        if 1 < where.size < needed:
            raise NotEnoughRanksError(
                f"job array {where.job_id} has {where.size} elements but hpcfutures needs at "
                f"least {needed}, one per role: "
                + ("a client running the scheduler" if colocated else "a scheduler, a client")
                + f" and at least one worker. Submit it with --array=0-{needed - 1} or more"
                + ("" if colocated else
                   ", or pass scheduler_in_client=True (HPCFUTURES_SCHEDULER_IN_CLIENT=1)"))
        return self._identity(
            where.rank, where.size, launch_id=_launch_id(env, f"{where.job_id}-array"),
            single_host=False,
            fields={**_fields(env, where.job_id, "array"), "array_job_id": where.job_id},
            reasons=(f"rank {where.rank} of {where.size} from SLURM_ARRAY_TASK_ID={where.index}"
                     " counted from SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT",
                     f"launch id from SLURM_ARRAY_JOB_ID={where.job_id}",
                     "elements may run on different nodes: binding to Dask's default address "
                     "(set host= or interface= to choose)"))

    def _identity(self, rank: int, size: int, **known: Any) -> Identity:
        """An Identity with the allocation's hints for a rank, or for a standalone process."""
        local_rank = int_var(self.environ, "SLURM_LOCALID", SYSTEM) or 0
        hints = self._rank_hints() if size > 1 else self._standalone_hints()
        return Identity(launcher=self.name, rank=rank, size=size, local_rank=local_rank,
                        **known, **hints)

    # -------------------------------------------------------------- resources
    def _rank_hints(self) -> dict[str, Any]:
        """Threads and memory for a worker rank (its GPUs: ``_support/gpus.py``); explicit
        options win later."""
        env = self.environ
        cpus = cpus_per_task(env)
        threads = self.settings.threads_per_worker or cpus or 1
        return {
            "threads": cpus,
            "memory_limit": memory_per_task(env, threads, tasks_on_this_node(env)),
        }

    def _standalone_hints(self) -> dict[str, Any]:
        """One process: as many local single-thread workers as Slurm gave this process CPUs."""
        env = self.environ
        cpus: int | None
        if in_srun_step(env):  # srun -n1: the step's CPUs
            cpus = cpus_per_task(env) or 1
        else:  # the batch script has every CPU of the job on this node
            cpus = int_var(env, "SLURM_CPUS_ON_NODE", SYSTEM)
        workers = self.settings.max_workers or cpus or available_cores()
        threads = self.settings.threads_per_worker or 1
        return {
            "local_workers": cpus,
            "memory_limit": memory_per_task(env, threads, workers),
        }

    # ------------------------------------------------------ exchange and hooks
    def address_exchange(self, identity: Identity) -> AddressExchange:
        array_job = identity.fields.get("array_job_id")
        if array_job:
            return ArrayFileExchange.for_array(self.settings, identity, array_job,
                                               array_position(self.environ).first)
        job = identity.fields.get("job_id")
        if job:
            return job_exchange(self.settings, identity, job)
        return super().address_exchange(identity)

    def client_finished(self, identity: Identity, exit_status: int,
                        crashed: int | None = None) -> None:
        """Cancel array elements still pending: nothing is left for them to do."""
        array_job = identity.fields.get("array_job_id")
        if array_job:
            cancel_pending(array_job)


def _launch_id(environ: Mapping[str, str], local: str) -> str:
    """Unique per launch; the cluster name keeps clusters that share a home apart."""
    cluster = environ.get("SLURM_CLUSTER_NAME", "")
    return f"slurm-{cluster}-{local}" if cluster else f"slurm-{local}"


def _fields(environ: Mapping[str, str], job: str, step: str) -> dict[str, str]:
    """Names usable in ``scheduler_file``: ``{job_id}``, ``{step_id}``, ``{cluster}``."""
    return {"job_id": job, "step_id": step, "cluster": environ.get("SLURM_CLUSTER_NAME", "")}
