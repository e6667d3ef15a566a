"""A launcher plug-in for the "toy batch system", a fictional scheduler.

The toy batch system starts the same command once per task of a job and tells
each copy who it is through environment variables:

==============  ==========================================================
``TOY_JOB_ID``  the job's id, the same in every copy
``TOY_TASK_ID`` this copy's index, ``0`` to ``TOY_NTASKS - 1``
``TOY_NTASKS``  how many copies the job has
``TOY_NNODES``  (optional) how many nodes the job spans
==============  ==========================================================

That is all hpcfutures needs: :meth:`ToyLauncher.detect` recognises a toy job,
:meth:`ToyLauncher.identity` turns the variables into a rank, a world size and
a launch id.  The scheduler's address travels through the default private
scheduler file, so :meth:`~hpcfutures.Launcher.address_exchange` is inherited.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from hpcfutures import Launcher, LauncherError
from hpcfutures.launchers import Identity

__all__ = ["ToyLauncher"]


class ToyLauncher(Launcher):
    """Copies of one script started by the toy batch system."""

    name = "toy"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        """Say why this is a toy job (``hpcfutures info`` shows it), or None if it is not."""
        job_id = environ.get("TOY_JOB_ID", "")
        if job_id:
            return f"TOY_JOB_ID={job_id} is set: a task of a toy batch system job"
        return None

    def identity(self) -> Identity:
        """Rank, size and launch id of this copy, from the TOY_* variables."""
        job_id = self._text("TOY_JOB_ID")
        rank = self._integer("TOY_TASK_ID")
        size = self._integer("TOY_NTASKS")
        nodes = self.environ.get("TOY_NNODES", "")
        return Identity(
            launcher=self.name,
            rank=rank,
            size=size,
            # Unique to this launch, and the same in every copy: it is stamped
            # into the scheduler file, so a file left by another job is ignored.
            launch_id=f"toy-{job_id}",
            # All copies on one node: bind to loopback.  Unknown: Dask's
            # default address (host= or interface= choose another).
            single_host=nodes == "1",
            # Fields usable in scheduler_file, e.g. "/scratch/{user}/toy-{job_id}.json".
            fields={"job_id": job_id},
            reasons=(f"rank {rank} of {size} from TOY_TASK_ID/TOY_NTASKS",
                     f"launch id from TOY_JOB_ID={job_id}"),
        )

    # An optional hook: runs on each worker rank just before its Dask worker starts.
    def before_worker(self, identity: Identity) -> None:
        print(f"toy task {identity.rank}: starting a worker", file=sys.stderr, flush=True)

    # -------------------------------------------------------------- helpers
    def _text(self, name: str) -> str:
        value = self.environ.get(name, "")
        if not value:
            raise LauncherError(
                f"the toy launcher needs the environment variable {name}, which is not set; "
                "is this script running as a toy batch system job?"
            )
        return value

    def _integer(self, name: str) -> int:
        text = self._text(name)
        try:
            return int(text)
        except ValueError:
            raise LauncherError(f"{name}={text!r} is not an integer") from None
