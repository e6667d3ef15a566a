"""The MPI plug-in: processes started by ``mpiexec``/``mpirun`` or ``srun --mpi=pmi2``.

Who am I: rank and size of ``COMM_WORLD``, after checking that the MPI world
is the whole launch (under ``srun`` without ``--mpi`` every task is an MPI
singleton of size 1, and trusting that would make every task rank 0).

Where is the scheduler: rank 0 broadcasts its :class:`SchedulerInfo` over
MPI (:class:`BroadcastExchange`); no file and no shared filesystem.  MPI is
initialised during negotiation, before Dask is imported, and the broadcast
happens only once the scheduler runs and everyone else looks it up, i.e.
after every import that could block a rank (a broadcast started while some
ranks are still importing is what hangs large launches elsewhere).  It is
non-blocking with a deadline, so a missing scheduler is a StartupTimeoutError.

How the launch ends::

    client leaves      every rank: Ibarrier (deadline) -> MPI_Finalize -> exit 0
                       (non-client ranks through C exit(): see _mpi.exit_process);
                       the client goes on running the program, whose exit status
                       (an uncaught exception: 1) is the job's
    a call killed      client: MPI_Abort(that rank's status): the dead rank cannot
      a worker rank    finalize; others: wait for that abort (deadline), else abort
    Ctrl-C, SIGTERM    client: MPI_Abort(130 or 143): MPI's runtime is ending the job
    uncaught exception MPI_Abort on that rank (see _mpi.py) while MPI is still
      (not finalized)  initialised: nobody waits forever

Detection reads environment variables only; mpi4py is imported (and MPI
initialised) by :meth:`MPILauncher.identity`, i.e. only when this plug-in is used.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
import traceback
from collections.abc import Mapping, MutableMapping

from .._errors import LauncherError, StartupTimeoutError
from .._support.backoff import Backoff
from .._support.patience import in_seconds
from . import _mpi
from ._base import Launcher
from ._batchenv import MPI_RANK_VARIABLES, int_var
from ._exchange import AddressExchange, SchedulerInfo
from ._identity import SCHEDULER_RANK, Identity

__all__ = ["BroadcastExchange", "MPILauncher", "declared_size", "mpi_rank_variable"]

logger = logging.getLogger("hpcfutures")

#: The launcher named in messages about garbled variables (see ``_batchenv.int_var``).
SYSTEM = "MPI"
LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "MV2_COMM_WORLD_LOCAL_RANK")
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "MV2_COMM_WORLD_LOCAL_SIZE")
JOB_ID_VARIABLES = ("PMI_JOBID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
#: What an MPI launcher tells its ranks about their place in the launch.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_COMM_WORLD_", "OMPI_MCA_ess_", "MPI_LOCAL",
                     "MV2_COMM_WORLD_")

#: Seconds a non-client rank waits for a failed client to abort the job (its
#: Dask shutdown takes at most about 20 s) before aborting it itself.
FAILURE_GRACE = 30.0


# ------------------------------------------------------------ the environment
def mpi_rank_variable(environ: Mapping[str, str]) -> tuple[str, str | None, str] | None:
    """(rank variable, size variable, who sets it) of the MPI launcher present, else None."""
    for rank_var, size_var, who in MPI_RANK_VARIABLES:
        if environ.get(rank_var, "") != "":
            return rank_var, size_var, who
    return None


def srun_task(environ: Mapping[str, str]) -> bool:
    """Whether ``srun`` itself started this process (not mpiexec inside a Slurm job)."""
    if environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID", "")) == "":
        return False
    found = mpi_rank_variable(environ)
    if found is None:
        return True
    rank_var, size_var, _ = found
    tasks = environ.get("SLURM_STEP_NUM_TASKS", environ.get("SLURM_NTASKS"))
    return (environ.get(rank_var) == environ.get("SLURM_PROCID")
            and (size_var is None or environ.get(size_var) == tasks))


def declared_size(environ: Mapping[str, str]) -> tuple[int, str] | None:
    """How many processes the launcher says it started, and the variable that says so.

    MPI's own variables first; then, for a task of an ``srun`` step, the
    step's task count (that is how singletons under ``srun`` are recognised);
    then ``hpcfutures run``'s count.
    """
    found = mpi_rank_variable(environ)
    candidates = [found[1]] if found is not None and found[1] else []
    if srun_task(environ):
        candidates += ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]
    for name in [*candidates, "HPCFUTURES_SIZE"]:
        size = int_var(environ, name, SYSTEM)
        if size is not None:
            return size, name
    return None


def check_world(size: int, library: str, environ: Mapping[str, str]) -> None:
    """Refuse a COMM_WORLD that is not the whole launch (one scheduler per rank otherwise)."""
    declared = declared_size(environ)
    if declared is None or declared[0] == size:
        return
    count, variable = declared
    raise LauncherError(
        f"MPI's COMM_WORLD has {size} process(es) but the launch has {count} "
        f"({variable}={count}): {_mismatch_advice(count, variable, library)}"
    )


def _mismatch_advice(count: int, variable: str, library: str) -> str:
    if variable.startswith("SLURM_"):
        return (f"without --mpi, srun makes every task its own MPI singleton. Add --mpi=pmi2 "
                f"(srun --mpi=pmi2 -n {count} python ...), or let Slurm give the roles without "
                "MPI: hpcfutures.SlurmExecutor() or launcher='slurm'")
    if variable == "HPCFUTURES_SIZE":
        return ("'hpcfutures run' starts plain processes, not MPI ranks: use "
                "hpcfutures.Executor() with it, or start the script with mpiexec")
    return (f"the MPI library mpi4py uses ({library}) does not match the launcher that "
            "started the job. Start the script with that library's mpiexec (for the mpich "
            "wheel: the mpiexec it installs), or with srun --mpi=pmi2")


def single_host(environ: Mapping[str, str], size: int) -> bool:
    """Whether every rank runs on this host (then loopback is used), as far as known."""
    for name in LOCAL_SIZE_VARIABLES:
        local_size = int_var(environ, name, SYSTEM)
        if local_size is not None:
            return local_size == size
    return srun_task(environ) and int_var(environ, "SLURM_STEP_NUM_NODES", SYSTEM) == 1


def several_hosts(environ: Mapping[str, str], size: int) -> str:
    """How the launcher shows that the ranks span more than one host; empty if it does not."""
    for name in LOCAL_SIZE_VARIABLES:
        local = int_var(environ, name, SYSTEM)
        if local is not None:
            return "" if local >= size else f"{name}={local}: {size - local} ranks elsewhere"
    nodes = int_var(environ, "SLURM_STEP_NUM_NODES", SYSTEM) if srun_task(environ) else None
    return f"{nodes} nodes in the Slurm step" if nodes and nodes > 1 else ""


def local_rank(environ: Mapping[str, str]) -> int | None:
    for name in LOCAL_RANK_VARIABLES:
        rank = int_var(environ, name, SYSTEM)
        if rank is not None:
            return rank
    return int_var(environ, "SLURM_LOCALID", SYSTEM) if srun_task(environ) else None


def job_label(environ: Mapping[str, str]) -> str:
    """A label for this launch; only a label, since a broadcast never leaves its own world."""
    if srun_task(environ) and environ.get("SLURM_JOB_ID"):
        step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID", ""))
        return f"{environ['SLURM_JOB_ID']}.{step}"
    for name in JOB_ID_VARIABLES:
        if environ.get(name):
            return environ[name]
    return "comm-world"


def _hide_launcher_variables(environ: MutableMapping[str, str]) -> None:
    """Keep a one-rank launch's local worker processes from posing as its rank.

    MPI has read them at initialisation; a child that inherited ``PMI_FD``
    and imports mpi4py would speak PMI on a file descriptor it does not own
    (in MPICH: an assertion failure) instead of becoming a singleton.
    """
    for name in [n for n in environ if n.startswith(LAUNCHER_PREFIXES)]:
        del environ[name]


def _mpi4py_installed() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


# --------------------------------------------------------------- the plug-in
class MPILauncher(Launcher):
    """Ranks from MPI's ``COMM_WORLD``; the scheduler's address by broadcast."""

    name = "mpi"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        found = mpi_rank_variable(environ)
        if found is None:
            return None
        if srun_task(environ) and not _mpi4py_installed():
            return None  # srun's own numbering serves the Slurm plug-in without MPI
        return f"{found[0]}={environ[found[0]]} is set (started by {found[2]})"

    def identity(self) -> Identity:
        rank, size, library = self._world()
        check_world(size, library, self.environ)
        if size == 1 and self.environ is os.environ:
            _hide_launcher_variables(os.environ)
        label = job_label(self.environ)
        cpus = (int_var(self.environ, "SLURM_CPUS_PER_TASK", SYSTEM)
                if srun_task(self.environ) else None)
        declared = declared_size(self.environ)
        return Identity(
            launcher=self.name,
            rank=rank,
            size=size,
            launch_id=f"mpi-{label}",
            single_host=single_host(self.environ, size),
            several_hosts=several_hosts(self.environ, size),
            local_rank=local_rank(self.environ),
            threads=cpus,
            fields={"job_id": label},
            reasons=(f"rank {rank} of {size} from MPI's COMM_WORLD ({library})",
                     f"the launcher agrees: {declared[1]}={declared[0]}" if declared else
                     "the launcher sets no size variable to check the world against"),
        )

    def _world(self) -> tuple[int, int, str]:
        """(rank, size, library); initialises MPI.  Tests replace it with a fake world."""
        return _mpi.world_facts()

    def address_exchange(self, identity: Identity) -> AddressExchange:
        return BroadcastExchange(_mpi.Broadcast(SCHEDULER_RANK), rank=identity.rank,
                                 timeout=self.lookup_timeout(identity))

    # ------------------------------------------------------------------ the end
    def client_finished(self, identity: Identity, exit_status: int,
                        crashed: int | None = None) -> None:
        """Finalize with the others, however the client's block ended: the program may
        catch its exception and go on (an uncaught one still aborts the job at exit:
        see ``_mpi._install_abort_on_uncaught_exception``).  A worker rank that a call
        killed cannot finalize: then the job ends with MPI_Abort and that rank's status.
        """
        if crashed is not None:
            _report_crash(identity, crashed)
            _mpi.abort(crashed)
        if exit_status in STOPPED_BY_SIGNAL:
            # Ctrl-C or SIGTERM reached the whole job (mpiexec forwards it to every
            # rank) and MPI's runtime is taking it down: a barrier then never
            # completes (under MPICH every rank would wait out its deadline).
            _report_stop(identity, exit_status)
            _mpi.abort(exit_status)
        if not self.settings.exit_when_done:
            return  # every rank carries on; mpi4py finalizes at exit
        if not _mpi.finalize_together(self.settings.timeout):
            logger.error("rank %d (client): the other ranks did not finish within %g s; "
                         "aborting the job", identity.rank, self.settings.timeout)
            _mpi.abort(1)

    def before_exit(self, identity: Identity, exit_status: int) -> None:
        """Finalize with the client; if it never comes (it failed and aborts), end the job."""
        grace = self.settings.timeout if exit_status == 0 else FAILURE_GRACE
        if _mpi.finalize_together(grace):
            _mpi.exit_process(exit_status)
        logger.error("rank %d: the client neither finished nor aborted the job within %g s; "
                     "aborting it", identity.rank, grace)
        _mpi.abort(exit_status or 1)


#: The client's statuses after Ctrl-C (KeyboardInterrupt) and SIGTERM (SystemExit(143)).
STOPPED_BY_SIGNAL = (130, 143)


def _report_stop(identity: Identity, exit_status: int) -> None:
    """Print the client's traceback now: MPI_Abort ends the process before Python would."""
    exc = sys.exc_info()[1]
    if exc is not None and not isinstance(exc, SystemExit):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(f"hpcfutures: the launch was stopped by a signal (the client's exit status "
          f"{exit_status}): aborting the MPI job (MPI_Abort)", file=sys.stderr, flush=True)


def _report_crash(identity: Identity, crashed: int) -> None:
    print(f"hpcfutures: a call killed a worker rank (exit status {crashed}), which cannot "
          f"finalize MPI: the client (MPI rank {identity.rank}) aborts the job with that "
          "status (MPI_Abort)", file=sys.stderr, flush=True)


# ---------------------------------------------------------- address exchange
class BroadcastExchange(AddressExchange):
    """The scheduler's info reaches the other ranks by MPI broadcast: no file needed.

    A broadcast only reaches its own ``COMM_WORLD``, so an answer from an
    earlier launch cannot arrive, and there is exactly one answer per launch:
    when its address does not answer yet, :meth:`lookup` hands it out again
    (after a pause) until the caller's deadline.
    """

    # MPI ends the whole job when a rank dies, so a silent scheduler is a
    # finished one: a worker that comes too late leaves with status 0.
    silence_means_finished = True

    def __init__(self, channel: _mpi.Broadcast, *, rank: int, timeout: float) -> None:
        self.channel = channel
        self.rank = rank
        self.timeout = timeout
        self.description = f"MPI broadcast from rank {channel.root} (the scheduler)"
        self._info: SchedulerInfo | None = None
        self._retry = Backoff(first=0.05, cap=1.0)

    def publish(self, info: SchedulerInfo) -> None:
        try:
            self.channel.send(info.to_json().encode(), time.monotonic() + self.timeout)
        except _mpi.DeadlinePassed:
            raise StartupTimeoutError(
                f"rank {self.rank} (the scheduler) broadcast its address, but after "
                f"{self.timeout:g} s not every rank had taken part: every rank must create "
                "the executor; check the other ranks' output, or raise the deadline with "
                "timeout= / HPCFUTURES_TIMEOUT"
            ) from None

    def lookup(self, timeout: float, stale: SchedulerInfo | None = None) -> SchedulerInfo:
        if self._info is None:
            self._info = self._receive(timeout)
        elif stale is not None:
            self._retry.sleep(time.monotonic() + timeout)
        return self._info

    def _receive(self, timeout: float) -> SchedulerInfo:
        try:
            payload = self.channel.receive(time.monotonic() + timeout)
        except _mpi.DeadlinePassed:
            raise StartupTimeoutError(
                f"rank {self.rank} waited {in_seconds(timeout)} for the scheduler's address, "
                f"broadcast over MPI by rank {self.channel.root}, and it never came. Check the "
                f"output of rank {self.channel.root} (the scheduler) for an error, or raise the "
                "deadline with timeout= / HPCFUTURES_TIMEOUT"
            ) from None
        return SchedulerInfo.from_json(payload.decode())
