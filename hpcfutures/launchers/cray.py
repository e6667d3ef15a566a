"""HPE/Cray launchers: PALS (``mpiexec`` on HPE Cray EX with PBS) and ALPS (``aprun``).

Both number the processes they start; neither puts the world size among its
own variables, but both serve Cray PMI, whose ``PMI_SIZE`` holds it::

    PALS (mpiexec -n 8 python job.py)        ALPS (aprun -n 8 python job.py)
    PALS_RANKID        -> rank               ALPS_APP_PE     -> rank
    PMI_SIZE           -> size               PMI_SIZE        -> size
    PALS_LOCAL_RANKID  -> local rank         ALPS_APP_ID     -> launch id
    PALS_LOCAL_SIZE    -> = size: one host   ALPS_APP_DEPTH  -> threads (aprun -d)
    PALS_APID          -> launch id
    PALS_DEPTH         -> threads (--depth)

Sources: the variables Slurm's mpi/cray_shasta plug-in and flux-coral2's
cray-pals shell plug-in set to imitate PALS for Cray PMI (PALS_RANKID,
PALS_LOCAL_RANKID, PALS_NODEID, PALS_APID, PALS_SPOOL_DIR, PMI_RANK,
PMI_SIZE, PMI_LOCAL_SIZE...); ALPS_APP_PE and ALPS_APP_DEPTH as read by
HPX's ALPS batch environment. Where PMI_SIZE is missing, set
``HPCFUTURES_SIZE`` to the number of processes (``aprun -e HPCFUTURES_SIZE=8``).
"""

from __future__ import annotations

from .._errors import LauncherError
from ._batchenv import int_var
from ._tasks import TaskLauncher

__all__ = ["ALPSLauncher", "PALSLauncher"]


class PALSLauncher(TaskLauncher):
    """Ranks started by HPE's Parallel Application Launch Service (``mpiexec`` in a PBS job)."""

    name = "pals"
    command = "mpiexec (PALS)"
    RANK_VAR = "PALS_RANKID"
    SIZE_VARS = ("PMI_SIZE",)
    LOCAL_RANK_VAR = "PALS_LOCAL_RANKID"
    LOCAL_SIZE_VAR = "PALS_LOCAL_SIZE"

    def launch(self) -> tuple[str, str]:
        apid = self.environ.get("PALS_APID", "")
        if not apid:
            raise LauncherError("a PALS rank without PALS_APID: cannot tell this launch's "
                                "scheduler file from another's; start the script with mpiexec")
        return apid, f"launch id from PALS_APID={apid}"

    def threads(self) -> int | None:
        return int_var(self.environ, "PALS_DEPTH", self.command)


class ALPSLauncher(TaskLauncher):
    """Processing elements started by Cray ALPS' ``aprun``."""

    name = "alps"
    command = "aprun"
    RANK_VAR = "ALPS_APP_PE"
    SIZE_VARS = ("PMI_SIZE",)

    def launch(self) -> tuple[str, str]:
        app = self.environ.get("ALPS_APP_ID", "")
        if not app:
            raise LauncherError("an aprun process without ALPS_APP_ID: cannot tell this "
                                "launch's scheduler file from another's")
        return app, f"launch id from ALPS_APP_ID={app}"

    def threads(self) -> int | None:
        return int_var(self.environ, "ALPS_APP_DEPTH", self.command)
