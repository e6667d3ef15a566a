"""The shape shared by task launchers: ``flux run``, ``jsrun``, ``aprun``, PALS' ``mpiexec``.

Each starts N copies of the script and tells every copy its number in the
environment, the way ``srun`` does::

    rank   <- RANK_VAR                 (FLUX_TASK_RANK, JSM_NAMESPACE_RANK, ...)
    size   <- the first of SIZE_VARS   (FLUX_JOB_SIZE, ...; HPCFUTURES_SIZE last)
    launch <- the launcher's own id    (one scheduler file per launch)

A subclass names its variables and says how it identifies a launch; this
class does the rest, including stepping aside for an ``mpiexec`` started
inside the launcher's tasks (see :func:`._batchenv.mpi_disagreement`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from .._errors import LauncherError
from ._base import Launcher
from ._batchenv import SIZE_VAR, int_var, mpi_disagreement, safe_id, size_override
from ._identity import Identity

__all__ = ["TaskLauncher"]


class TaskLauncher(Launcher):
    """Processes numbered by a launcher through environment variables."""

    #: How users start the script, for messages: "flux run".
    command: ClassVar[str]
    #: This process's rank, 0-based.
    RANK_VAR: ClassVar[str]
    #: Variables that may hold the world size, in order of trust; HPCFUTURES_SIZE comes last.
    SIZE_VARS: ClassVar[tuple[str, ...]] = ()
    #: The rank among the launch's processes on this node, if the launcher says.
    LOCAL_RANK_VAR: ClassVar[str | None] = None
    #: Processes of the launch on this node; equal to the size means one host.
    LOCAL_SIZE_VAR: ClassVar[str | None] = None
    #: Nodes of the launch; 1 means one host.
    NODES_VAR: ClassVar[str | None] = None

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        if environ.get(cls.RANK_VAR, "").strip() == "":
            return None
        try:
            rank, size, size_var = cls._numbers(environ)
        except LauncherError:
            return f"{cls.RANK_VAR} is set ({cls.command})"  # identity() explains what is wrong
        if mpi_disagreement(environ, rank, size):
            return None  # an mpiexec inside our task: the MPI plug-in's business
        return (f"{cls.RANK_VAR}={rank} and {size_var}={size}: task {rank} of {size} "
                f"of '{cls.command}'")

    @classmethod
    def _numbers(cls, environ: Mapping[str, str]) -> tuple[int, int, str]:
        """(rank, size, the variable the size came from)."""
        rank = int_var(environ, cls.RANK_VAR, cls.command)
        for name in cls.SIZE_VARS:
            size = int_var(environ, name, cls.command)
            if size is not None:
                break
        else:
            name, size = SIZE_VAR, size_override(environ)
        if size is None:
            raise LauncherError(
                f"'{cls.command}' started this process ({cls.RANK_VAR}={rank}) but none of "
                f"{', '.join(cls.SIZE_VARS) or 'its variables'} says how many processes it "
                f"started; set {SIZE_VAR} to that number in their environment "
                f"(e.g. {SIZE_VAR}=8 for 8 processes)"
            )
        if rank is None or not 0 <= rank < size:
            raise LauncherError(f"{cls.RANK_VAR}={rank} is not a rank of a launch of {size} "
                                f"processes ({name}={size})")
        return rank, size, name

    # ------------------------------------------------------------------ identity
    def launch(self) -> tuple[str, str]:
        """(an id unique to this launch, a sentence saying where it came from)."""
        raise NotImplementedError

    def threads(self) -> int | None:
        """CPUs each process was given, if the launcher says."""
        return None

    def identity(self) -> Identity:
        env = self.environ
        rank, size, size_var = self._numbers(env)
        why_not = mpi_disagreement(env, rank, size)
        if why_not:
            raise LauncherError(f"{why_not}; use MPIExecutor (launcher='mpi'), or start the "
                                f"script with '{self.command}' alone")
        launch_id, launch_reason = self.launch()
        local_rank = (int_var(env, self.LOCAL_RANK_VAR, self.command)
                      if self.LOCAL_RANK_VAR else None)
        single_host, host_reason = self._single_host(size)
        return Identity(
            launcher=self.name,
            rank=rank,
            size=size,
            launch_id=f"{self.name}-{safe_id(launch_id)}",
            single_host=single_host,
            several_hosts=self._several_hosts(size),
            local_rank=local_rank,
            threads=self.threads(),
            fields={"job_id": safe_id(launch_id)},
            reasons=(f"rank {rank} of {size} from {self.RANK_VAR}/{size_var}",
                     launch_reason, host_reason),
        )

    def _single_host(self, size: int) -> tuple[bool, str]:
        env = self.environ
        if self.NODES_VAR and int_var(env, self.NODES_VAR, self.command) == 1:
            return True, f"{self.NODES_VAR}=1: one host, binding to loopback"
        if self.LOCAL_SIZE_VAR and int_var(env, self.LOCAL_SIZE_VAR, self.command) == size:
            return True, (f"{self.LOCAL_SIZE_VAR}={size}: every process on this host, "
                          "binding to loopback")
        return False, ("processes may run on several hosts: binding to Dask's default address "
                       "(set host= or interface= to choose)")

    def _several_hosts(self, size: int) -> str:
        env = self.environ
        nodes = int_var(env, self.NODES_VAR, self.command) if self.NODES_VAR else None
        if nodes is not None and nodes > 1:
            return f"{self.NODES_VAR}={nodes}"
        local = int_var(env, self.LOCAL_SIZE_VAR, self.command) if self.LOCAL_SIZE_VAR else None
        if local is not None and local < size:
            return f"{self.LOCAL_SIZE_VAR}={local}: {size - local} of {size} processes elsewhere"
        return ""
