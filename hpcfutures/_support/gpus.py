"""Which GPUs a worker rank has: read from what the launcher (or the user) set.

Batch systems and vendors name a node's GPUs in environment variables: Slurm
sets ``CUDA_VISIBLE_DEVICES`` (and its AMD and Intel twins) for each task and
lists the step's or job's GPUs in ``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS``;
other launchers (``mpiexec``, ``hpcfutures run``, the laptop) set nothing, so
the user declares them with :data:`DECLARE_VAR`.  The GPUs a process sees are
shared among the worker ranks of its node: each worker owns its share (the
GPUs it declares to the scheduler as a resource), and nobody else's.  Pure
functions of the environment, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

__all__ = ["DECLARE_VAR", "VENDOR_VARIABLES", "GpuShare", "local_size", "node_ranks", "share_of",
           "visible_gpus", "worker_slot"]

#: Declares the GPUs of a node to share among its worker ranks, where the
#: launcher says nothing (``HPCFUTURES_GPUS=0,1,2,3 mpiexec -n 6 ...``);
#: ``none`` declares none.  It wins over what the launcher set.
DECLARE_VAR = "HPCFUTURES_GPUS"
#: The variables a process reads to know its GPUs (NVIDIA, AMD ROCm, AMD HIP,
#: Intel Level Zero, OpenCL as Slurm sets it), set to a worker's share and to each
#: call's GPUs.
VENDOR_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                    "ZE_AFFINITY_MASK", "GPU_DEVICE_ORDINAL")
#: Where Slurm lists a step's or job's GPUs by the node's own indices (read when it
#: set no vendor variable).
_SLURM_LISTS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


@dataclasses.dataclass(frozen=True)
class GpuShare:
    """A worker's GPUs: ``ids`` as the vendor variables name them, the ``variables``
    to set to them, and whether they are its own (declared as its resource) or
    only pinned, shared with other ranks (more ranks than GPUs on a node)."""

    ids: tuple[str, ...] = ()
    variables: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    own: bool = True
    source: str = ""

    @property
    def count(self) -> int:
        """GPUs this worker declares: none unless they are its own."""
        return len(self.ids) if self.own else 0


def _split(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    return [] if items in (["NoDevFiles"], ["none"], ["None"]) else items


def visible_gpus(environ: Mapping[str, str]) -> tuple[list[str], tuple[str, ...], str]:
    """The GPUs this process sees, the variables to pin them with, and where they came from.

    :data:`DECLARE_VAR` first, then the vendor variables (the first one set;
    all of those set are pinned together, as Slurm sets them together), then
    Slurm's lists of the node's indices.
    """
    present = tuple(name for name in VENDOR_VARIABLES if name in environ)
    pinned = present or ("CUDA_VISIBLE_DEVICES",)
    if environ.get(DECLARE_VAR, "").strip():
        return _split(environ[DECLARE_VAR]), pinned, DECLARE_VAR
    for name in (*present, *_SLURM_LISTS):
        if name in environ:
            return _split(environ[name]), pinned, name
    return [], pinned, ""


def share_of(environ: Mapping[str, str], index: int | None, workers: int | None) -> GpuShare:
    """The GPUs of the worker ``index`` of the ``workers`` worker ranks on its node.

    As many GPUs as workers or more: each worker owns a contiguous share
    (one rank on a node of 4 GPUs owns all 4).  Fewer: the first workers own
    one each and the others are only pinned round-robin (their plain calls
    still see a GPU, but no call that asks for one goes there).  A task Slurm
    bound to GPUs of its own (``--gpus-per-task``:
    ``SLURMD_TRES_BIND=gpu:per_task:N``) owns what it sees.  ``index``/``workers``
    unknown: the process owns all it sees.
    """
    ids, variables, source = visible_gpus(environ)
    if not ids:
        return GpuShare((), variables, True, source)
    bound = source != DECLARE_VAR and (bool(environ.get("SLURM_GPUS_PER_TASK"))
                                       or "per_task" in environ.get("SLURMD_TRES_BIND", ""))
    if index is None or not workers or workers <= 1 or bound:
        return GpuShare(tuple(ids), variables, True, source)
    index %= workers
    if len(ids) >= workers:
        lo, hi = index * len(ids) // workers, (index + 1) * len(ids) // workers
        return GpuShare(tuple(ids[lo:hi]), variables, True, source)
    return GpuShare((ids[index % len(ids)],), variables, index < len(ids), source)


def worker_slot(rank: int, size: int, first_worker: int, local_rank: int | None,
                local_size: int | None, node_ranks: Sequence[int] | None,
                single_host: bool) -> tuple[int | None, int | None]:
    """This worker's place among the worker ranks of its node: (index, count).

    Known exactly where the launcher lists the node's ranks (Slurm's
    ``SLURM_GTIDS``) or where every rank is on one host; else by local rank
    (the scheduler's and the client's places on their node then count too).
    """
    if node_ranks:
        workers = [r for r in node_ranks if r >= first_worker]
        if rank in workers:
            return workers.index(rank), len(workers)
    if single_host and size > first_worker and rank >= first_worker:
        return rank - first_worker, size - first_worker
    return local_rank, local_size


#: Where MPI launchers say how many ranks share this node (MPICH's Hydra, Open MPI).
_LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                         "MV2_COMM_WORLD_LOCAL_SIZE", "PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE")


def node_ranks(environ: Mapping[str, str], launcher: str) -> list[int] | None:
    """The global ranks on this node, where Slurm lists them (``SLURM_GTIDS``, set
    for each task of a step: trusted only when Slurm numbered the ranks)."""
    if launcher != "slurm":
        return None
    try:
        return [int(rank) for rank in environ.get("SLURM_GTIDS", "").split(",") if rank]
    except ValueError:
        return None


def local_size(environ: Mapping[str, str]) -> int | None:
    """How many ranks of the launch this node has, where the launcher says."""
    for name in _LOCAL_SIZE_VARIABLES:
        text = environ.get(name, "")
        if text.isdigit() and int(text) > 0:
            return int(text)
    gtids = [rank for rank in environ.get("SLURM_GTIDS", "").split(",") if rank]
    return len(gtids) or None
