"""The shape shared by batch systems whose launches are job arrays: Grid Engine, PBS, LSF.

A process inside one of their jobs is one of::

    ARRAY   an element of a job array (qsub -t 1-8, qsub -J 0-7, bsub -J 'a[1-8]'),
            each element one process running python job.py:
              rank  <- the element's place in the array's index range
              file  <- keyed by the array's job id (every element shares it)
    TASKS   one of N tasks a launcher of the batch system started (pbsdsh)
    BATCH   the job script itself: one process, standalone, local workers on
            the CPUs the job was given on this host

Array elements start whenever the queue lets them, so, as for Slurm's arrays
(:mod:`._slurm_array`): late elements wait ``array_timeout`` for the others,
the scheduler leaves a tombstone so that elements starting after the end exit
at once with status 0, and the client deletes the elements still pending.

``mpiexec`` inside such a job keeps the job's variables in every rank, so
these plug-ins step aside whenever an MPI rank variable is present: the MPI
plug-in knows the ranks then (a parallel-environment job in Grid Engine, an
``mpiexec`` in a PBS or LSF job).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import ClassVar

from .._errors import LauncherError, NotEnoughRanksError
from ._base import Launcher
from ._batchenv import mpi_launched
from ._exchange import AddressExchange
from ._identity import Identity, minimum_size
from ._slurm_array import ArrayPosition

__all__ = ["ArrayPosition", "JobArrayLauncher", "Mode"]


class Mode(enum.Enum):
    """How the process was started inside the batch job."""

    ARRAY = "job array element"
    TASKS = "task of the job"
    BATCH = "job script"


class JobArrayLauncher(Launcher):
    """A batch system whose elements, tasks or job script run the user's script."""

    #: The system's name for messages: "Grid Engine".
    system: ClassVar[str]
    #: How to submit an array of ``{n}`` elements (the last index from 0: ``{last0}``),
    #: for messages: "qsub -t 1-{n} job.sh".
    array_example: ClassVar[str]

    # ------------------------------------------------------- subclass questions
    @classmethod
    def mode(cls, environ: Mapping[str, str]) -> Mode | None:
        """How this process was started in a job of this system; None outside its jobs."""
        raise NotImplementedError

    @classmethod
    def job_id(cls, environ: Mapping[str, str]) -> str:
        """The job's id (for an array element: the array's)."""
        raise NotImplementedError

    def array_position(self) -> tuple[ArrayPosition, tuple[str, ...]]:
        """Where this element sits in its array, and why hpcfutures thinks so."""
        raise NotImplementedError

    def task_identity(self) -> Identity:
        """For systems with a task launcher (pbsdsh): the identity in TASKS mode."""
        raise LauncherError(f"{self.system} has no task launcher")

    def slots(self) -> tuple[int | None, str]:
        """CPUs this process was given on its host, and the variable that says so."""
        return None, ""

    def cancel_pending(self, array_job_id: str) -> None:
        """Delete the array's elements that have not started yet."""

    # ---------------------------------------------------------------- detection
    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        try:
            mode = cls.mode(environ)
        except LauncherError as err:
            return f"{cls.system} job, but: {err}"  # identity() raises it again
        if mode is None or mpi_launched(environ):
            return None
        return f"{cls.system} job {cls.job_id(environ)}: this process is its {mode.value}"

    # ----------------------------------------------------------------- identity
    def identity(self) -> Identity:
        mode = self.mode(self.environ)
        if mode is None:
            raise LauncherError(
                f"launcher={self.name!r} needs a {self.system} job, but this process is not "
                "in one; use hpcfutures.Executor() to detect the launcher"
            )
        mpi = mpi_launched(self.environ)
        if mpi:
            raise LauncherError(f"{mpi} inside {self.system} job {self.job_id(self.environ)}; "
                                "use MPIExecutor (launcher='mpi')")
        if mode is Mode.ARRAY:
            return self._array_identity()
        if mode is Mode.TASKS:
            return self.task_identity()
        return self._batch_identity()

    def _array_identity(self) -> Identity:
        where, reasons = self.array_position()
        needed = minimum_size(self.settings.scheduler_in_client)
        if 1 < where.size < needed:
            raise NotEnoughRanksError(
                f"job array {where.job_id} has {where.size} elements but hpcfutures needs at "
                f"least {needed} (a scheduler, a client and at least one worker, one element "
                "each): submit it as "
                f"{self.array_example.format(n=needed, last0=needed - 1)} or larger"
                + ("" if self.settings.scheduler_in_client else
                   ", or pass scheduler_in_client=True (HPCFUTURES_SCHEDULER_IN_CLIENT=1)"))
        slots, slots_var = self.slots()
        return Identity(
            launcher=self.name, rank=where.rank, size=where.size,
            launch_id=f"{self.name}-{where.job_id}-array", single_host=False,
            threads=slots,
            fields={"job_id": where.job_id, "array_job_id": where.job_id},
            reasons=(*reasons,
                     f"launch id from the array's job id {where.job_id}",
                     *([f"{slots} thread(s) per worker from {slots_var}"] if slots else []),
                     "elements may run on different hosts: binding to Dask's default address "
                     "(set host= or interface= to choose)"))

    def _batch_identity(self) -> Identity:
        job = self.job_id(self.environ)
        slots, slots_var = self.slots()
        return Identity(
            launcher=self.name, rank=0, size=1,
            launch_id=f"{self.name}-{job}.batch-{os.getpid()}", single_host=True,
            local_workers=slots, fields={"job_id": job},
            reasons=(f"the job script of {self.system} job {job}, not an array element: "
                     "one process, scheduler in it, local workers on this host",
                     f"{slots} local worker(s) from {slots_var}" if slots else
                     "one local worker per available core"))

    # ------------------------------------------------------ exchange and hooks
    def address_exchange(self, identity: Identity) -> AddressExchange:
        """Array elements: a tombstoned file, so elements that start after the end exit 0."""
        if identity.fields.get("array_job_id"):
            from ._schedfile import SchedulerFileExchange

            return SchedulerFileExchange.for_launch(self.settings, identity, tombstone=True)
        return super().address_exchange(identity)

    def client_finished(self, identity: Identity, exit_status: int,
                        crashed: int | None = None) -> None:
        """Delete the array's pending elements: nothing is left for them to do."""
        array_job = identity.fields.get("array_job_id")
        if array_job and identity.size > 1:
            self.cancel_pending(array_job)
