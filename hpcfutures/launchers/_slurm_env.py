"""Reading a Slurm allocation from the task environment: pure functions, no I/O.

The Slurm plug-in (:mod:`.slurm`) asks these helpers three kinds of question:

* *What started this process?*  An ``srun`` task (``SLURM_STEP_ID`` is set),
  the job's batch script or an ``salloc`` shell (no step: one process, even
  if ``SLURM_NTASKS`` says 8), or an element of a job array.  Checked on
  Slurm 22.05 (see ``ci/SLURM_FACTS.md``).
* *What does each worker get?*  Threads from ``SLURM_CPUS_PER_TASK``, a
  memory limit from ``SLURM_MEM_PER_CPU`` / ``SLURM_MEM_PER_NODE``, and a GPU
  chosen by the local rank.
* *Did an MPI launcher start us inside the job?*  Then the MPI plug-in, not
  this one, knows the ranks.

Keeping them free of side effects lets the tests feed fake environments.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

from .._errors import LauncherError
from ._batchenv import MPI_RANK_VARIABLES, int_var

__all__ = [
    "SYSTEM",
    "Mode",
    "cpus_per_task",
    "foreign_mpi_launch",
    "in_srun_step",
    "launch_mode",
    "memory_per_task",
    "step_size",
    "tasks_on_this_node",
]

#: Step ids Slurm reserves for the batch script, the "extern" step and the
#: like (>= 0xFFFFFFF0); they are not ``srun`` steps.
_SPECIAL_STEP_IDS = 0xFFFFFFF0
_MIB = 2**20
#: The launcher named in messages about garbled variables (see ``_batchenv.int_var``).
SYSTEM = "Slurm"
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class Mode(enum.Enum):
    """How the process was started inside the Slurm job."""

    STEP = "srun step"
    ARRAY = "job array element"
    BATCH = "batch script"


def in_srun_step(environ: Mapping[str, str]) -> bool:
    """Whether ``srun`` started this process (the batch script has no SLURM_STEP_ID)."""
    step = int_var(environ, "SLURM_STEP_ID", SYSTEM)
    return step is not None and step < _SPECIAL_STEP_IDS


def step_size(environ: Mapping[str, str]) -> int | None:
    """Tasks of this ``srun`` step (SLURM_NTASKS is the step's too, under srun)."""
    return (int_var(environ, "SLURM_STEP_NUM_TASKS", SYSTEM)
            or int_var(environ, "SLURM_NTASKS", SYSTEM))


def launch_mode(environ: Mapping[str, str]) -> Mode:
    """Step, array element or batch script.

    An array element counts as one rank of the array whether its script runs
    ``python job.py`` or ``srun python job.py`` (a one-task step); an
    element that runs a multi-task ``srun`` is a launch of its own.
    """
    step = in_srun_step(environ)
    if environ.get("SLURM_ARRAY_JOB_ID", "") != "" and (not step or step_size(environ) == 1):
        return Mode.ARRAY
    return Mode.STEP if step else Mode.BATCH


def foreign_mpi_launch(environ: Mapping[str, str]) -> str | None:
    """Why an MPI launcher (mpiexec/mpirun), not srun, started this process; else None.

    ``srun --mpi=pmi2|pmix`` sets PMI variables that agree with its own task
    numbering; ``mpiexec`` inside a job (whose daemons may be srun tasks, one
    per node) sets ranks that do not, and then only MPI knows the roles.
    """
    step = in_srun_step(environ)
    rank = environ.get("SLURM_PROCID", "")
    size = str(step_size(environ) or "")
    for rank_var, size_var, _ in MPI_RANK_VARIABLES:
        mpi_rank = environ.get(rank_var, "")
        if mpi_rank == "":
            continue
        mpi_size = environ.get(size_var, size) if size_var else size
        if not step or mpi_rank != rank or mpi_size != size:
            return (f"{rank_var}={mpi_rank} does not match srun's task {rank or '(none)'} "
                    f"of {size or '(no step)'}: an MPI launcher started this process")
    return None


def cpus_per_task(environ: Mapping[str, str]) -> int | None:
    """CPUs Slurm gave each task (``-c``), if it was asked for."""
    return int_var(environ, "SLURM_CPUS_PER_TASK", SYSTEM)


def expand_counts(text: str) -> list[int]:
    """Slurm's compressed per-node list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise LauncherError(f"cannot read the Slurm task list {text!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def tasks_on_this_node(environ: Mapping[str, str]) -> int:
    """Tasks of this step (or job) that share this node, for sharing its memory."""
    text = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE", "")
    counts = expand_counts(text) if text else []
    node = int_var(environ, "SLURM_NODEID", SYSTEM) or 0
    if node < len(counts):
        return max(counts[node], 1)
    return max(step_size(environ) or 1, 1)


def memory_bytes(name: str, text: str) -> int | None:
    """Bytes in a Slurm memory size (plain numbers are MiB: ``4000``, ``4G``); None for 0."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", text.upper())
    if match is None:
        raise LauncherError(f"{name}={text!r} is not a Slurm memory size (like 4000 or 4G)")
    return int(match[1]) * _UNITS.get(match[2], _MIB) or None


def memory_per_task(environ: Mapping[str, str], cpus: int, tasks_on_node: int) -> int | None:
    """A worker's share of the memory Slurm granted, in bytes; None if nothing was asked.

    ``--mem-per-cpu`` is per CPU, so a task gets it times its CPUs; ``--mem``
    is per node, so the tasks on a node split it evenly.
    """
    per_cpu = environ.get("SLURM_MEM_PER_CPU", "")
    if per_cpu:
        value = memory_bytes("SLURM_MEM_PER_CPU", per_cpu)
        return None if value is None else value * max(cpus, 1)
    per_node = environ.get("SLURM_MEM_PER_NODE", "")
    if per_node:
        value = memory_bytes("SLURM_MEM_PER_NODE", per_node)
        return None if value is None else value // max(tasks_on_node, 1)
    return None
