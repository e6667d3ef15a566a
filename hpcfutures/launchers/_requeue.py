"""Putting a batch job back in the queue, so that its rerun resumes from the journal.

::

    Slurm        scontrol requeue $SLURM_JOB_ID   (a batch job; #SBATCH --requeue)
                 requeues so far: SLURM_RESTART_COUNT
    Grid Engine  the job script exits with status 99 (the job's state becomes Rq)
    PBS          qrerun $PBS_JOBID
    LSF          brequeue $LSB_JOBID
                 requeues so far (these three): a counter file per job,
                 ~/.hpcfutures/requeues/<system>-<job id>

A cap (``max_requeues``) stops a job that never gets further from looping.
After a requeue the client leaves with :data:`REQUEUED_STATUS`; under Slurm,
PBS and LSF the batch system ends the job itself at once anyway.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._batchenv import run_command

__all__ = ["REQUEUED_STATUS", "RequeueOutcome", "requeue_job"]

logger = logging.getLogger("hpcfutures")

#: The exit status after a requeue: Grid Engine's "requeue this job".
REQUEUED_STATUS = 99


@dataclasses.dataclass(frozen=True)
class RequeueOutcome:
    """Whether the job was requeued, and the sentence that says so (or why not)."""

    requeued: bool
    message: str


@dataclasses.dataclass(frozen=True)
class _Job:
    system: str
    job: str
    #: The command that requeues it; None: the exit status does (Grid Engine).
    command: tuple[str, ...] | None
    #: Requeues so far as the batch system counts them; None: hpcfutures counts.
    count: int | None


def _this_job(environ: Mapping[str, str]) -> _Job | None:
    if environ.get("SLURM_JOB_ID"):
        job = environ["SLURM_JOB_ID"]
        count = environ.get("SLURM_RESTART_COUNT", "").strip()
        return _Job("Slurm", job, ("scontrol", "requeue", job),
                    int(count) if count.isdigit() else 0)
    if environ.get("JOB_ID") and environ.get("SGE_ROOT"):
        return _Job("Grid Engine", environ["JOB_ID"], None, None)
    if environ.get("PBS_JOBID"):
        return _Job("PBS", environ["PBS_JOBID"], ("qrerun", environ["PBS_JOBID"]), None)
    if environ.get("LSB_JOBID"):
        return _Job("LSF", environ["LSB_JOBID"], ("brequeue", environ["LSB_JOBID"]), None)
    return None


def _counter(job: _Job, home: Path) -> Path:
    name = f"{job.system.replace(' ', '')}-{job.job}".replace("/", "_")
    return home / "requeues" / name


def requeue_job(cap: int, then: str = "", environ: Mapping[str, str] | None = None,
                home: Path | None = None, run: Any = run_command) -> RequeueOutcome:
    """Requeue the batch job this process runs in, unless it was requeued ``cap`` times.

    Says so before it acts (Slurm ends the job at once): what it does, and ``then``.
    """
    environ = os.environ if environ is None else environ
    job = _this_job(environ)
    if job is None:
        return RequeueOutcome(False, "not requeued: this is not a Slurm, Grid Engine, PBS "
                                     "or LSF batch job (requeue=True needs one)")
    counter = _counter(job, home or Path.home() / ".hpcfutures")
    done = job.count if job.count is not None else _read_count(counter)
    if done >= cap:
        return RequeueOutcome(False, f"not requeued: {job.system} job {job.job} was requeued "
                                     f"{done} time(s) already, the most max_requeues={cap} "
                                     "allows; resubmit it to go on")
    how = ("exit status 99" if job.command is None else f"'{' '.join(job.command)}'")
    message = (f"requeueing {job.system} job {job.job} ({how}; requeue {done + 1} of at "
               f"most {cap})")
    logger.warning("%s%s", message, f": {then}" if then else "")
    if job.command is not None:
        result = run(job.command, f"requeue {job.system} job {job.job}",
                     otherwise="the job ends here; resubmit it to go on"
                     + (" (was it submitted with #SBATCH --requeue, as a batch job?)"
                        if job.system == "Slurm" else ""))
        if result is None:
            return RequeueOutcome(False, f"not requeued: '{' '.join(job.command)}' failed")
    if job.count is None:
        _write_count(counter, done + 1)
    return RequeueOutcome(True, message)


def _read_count(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _write_count(path: Path, count: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{count}\n")
    except OSError as err:
        logger.warning("could not count the requeue in %s (%s): max_requeues cannot stop "
                       "a loop of this job", path, err)
