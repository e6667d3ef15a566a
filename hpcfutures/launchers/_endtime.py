"""When the allocation ends: asked of the batch system that runs this job.

::

    end_time setting (HPCFUTURES_END_TIME)   epoch seconds or an ISO time: it wins
    Slurm        SLURM_JOB_ID     squeue -h -j JOB -o %e (SLURM_TIME_FORMAT=%s): the end
    Grid Engine  JOB_ID, SGE_*    qstat -j JOB: h_rt, from the job's start (its spool dir)
    PBS          PBS_JOBID        qstat -f JOB: Resource_List.walltime, from stime
    LSF          LSB_JOBID        bjobs -o time_left JOB: the time left (to the minute)

The environment tells which batch system runs the job, whatever launcher
started this process (``mpiexec`` inside a Slurm job still ends with the
job).  Each system has one small function here that runs its command through
:func:`~._batchenv.run_command` and a pure parser of that command's output,
which the unit tests feed real-looking text.  No answer (no limit, a command
that failed) is None: the executor then drains only on SIGTERM.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._batchenv import run_command

__all__ = [
    "AllocationEnd",
    "find_end",
    "parse_clock",
    "parse_lsf_time_left",
    "parse_pbs_end",
    "parse_sge_h_rt",
    "parse_slurm_end",
]

#: The log level of a question that failed: without an answer nothing drains (as
#: without a time limit), and a stale job id in the environment is no reason to warn.
QUIET = logging.DEBUG
#: Runs a batch system's command: ``run(command, purpose, env=...)`` -> CompletedProcess | None.
Runner = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class AllocationEnd:
    """The moment the allocation ends (seconds since the epoch) and who said so."""

    epoch: float
    source: str

    def left(self, now: float | None = None) -> float:
        """Seconds until the end (negative once it has passed)."""
        return self.epoch - (time.time() if now is None else now)

    def __str__(self) -> str:
        when = datetime.datetime.fromtimestamp(self.epoch, datetime.timezone.utc)
        return f"{when:%Y-%m-%d %H:%M:%S} UTC, in {self.left():.0f} s ({self.source})"


def parse_clock(text: str) -> float | None:
    """Seconds in ``[[D-]HH:]MM:SS``-style limits (``"1:0:0"``, ``"01:00:00"``, ``"3600"``)."""
    match = re.fullmatch(r"\s*(?:(\d+)-)?(\d+(?:\.\d+)?)(?::(\d+))?(?::(\d+))?\s*", text)
    if match is None:
        return None
    days, *fields = match.groups()
    parts = [float(f) for f in fields if f is not None]
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds + int(days or 0) * 86400


# --------------------------------------------------------------------- Slurm
def parse_slurm_end(text: str) -> float | None:
    """``squeue -o %e`` under ``SLURM_TIME_FORMAT=%s``: epoch seconds, else None
    (``N/A``/``Unknown``: no time limit, or not started)."""
    text = text.strip().splitlines()[0].strip() if text.strip() else ""
    return float(text) if text.isdigit() else None


def slurm_end(environ: Mapping[str, str], run: Runner) -> AllocationEnd | None:
    job = environ.get("SLURM_JOB_ID", "").strip()
    if not job:
        return None
    command = ["squeue", "-h", "-j", job, "-o", "%e"]
    result = run(command, "ask Slurm when the job ends",
                 env={**environ, "SLURM_TIME_FORMAT": "%s"}, level=QUIET)
    end = None if result is None else parse_slurm_end(result.stdout)
    return None if end is None else AllocationEnd(end, f"Slurm: squeue -j {job}")


# --------------------------------------------------------------- Grid Engine
def parse_sge_h_rt(text: str) -> float | None:
    """The ``h_rt`` of ``qstat -j`` (``hard resource_list: h_rt=3600,h_vmem=2G``), in seconds."""
    match = re.search(r"^hard resource_list:.*?\bh_rt=([^,\s]+)", text, re.MULTILINE)
    return None if match is None else parse_clock(match[1])


def sge_end(environ: Mapping[str, str], run: Runner) -> AllocationEnd | None:
    job = environ.get("JOB_ID", "").strip()
    spool = environ.get("SGE_JOB_SPOOL_DIR", "")
    if not job or not environ.get("SGE_ROOT"):
        return None
    result = run(["qstat", "-j", job], "ask Grid Engine for the job's h_rt", level=QUIET)
    limit = None if result is None else parse_sge_h_rt(result.stdout)
    if limit is None:
        return None
    try:  # execd writes the job's spool directory as it starts the job
        started = os.stat(os.path.join(spool, "config")).st_mtime
    except OSError:
        return None
    return AllocationEnd(started + limit, f"Grid Engine: h_rt={limit:g} s of job {job}")


# ----------------------------------------------------------------------- PBS
def parse_pbs_end(text: str) -> float | None:
    """``qstat -f``: ``stime`` (the start, ctime format) plus ``Resource_List.walltime``."""
    walltime = re.search(r"^\s*Resource_List\.walltime\s*=\s*(\S+)", text, re.MULTILINE)
    start = re.search(r"^\s*stime\s*=\s*(.+?)\s*$", text, re.MULTILINE)
    if walltime is None or start is None:
        return None
    limit = parse_clock(walltime[1])
    try:
        began = time.mktime(time.strptime(start[1], "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None
    return None if limit is None else began + limit


def pbs_end(environ: Mapping[str, str], run: Runner) -> AllocationEnd | None:
    job = environ.get("PBS_JOBID", "").strip()
    if not job:
        return None
    result = run(["qstat", "-f", job], "ask PBS for the job's walltime", level=QUIET)
    end = None if result is None else parse_pbs_end(result.stdout)
    return None if end is None else AllocationEnd(end, f"PBS: walltime of job {job}")


# ----------------------------------------------------------------------- LSF
def parse_lsf_time_left(text: str) -> float | None:
    """``bjobs -o time_left``: ``"1:23 L"`` (hours:minutes left), ``-`` without a limit."""
    match = re.search(r"(\d+):(\d+)", text)
    return None if match is None else int(match[1]) * 3600 + int(match[2]) * 60


def lsf_end(environ: Mapping[str, str], run: Runner) -> AllocationEnd | None:
    job = environ.get("LSB_JOBID", "").strip()
    if not job:
        return None
    result = run(["bjobs", "-noheader", "-o", "time_left", job], "ask LSF for the run limit",
                 level=QUIET)
    left = None if result is None else parse_lsf_time_left(result.stdout)
    return None if left is None else AllocationEnd(time.time() + left,
                                                   f"LSF: run limit of job {job}")


#: Asked in this order; the first system whose job this is answers.
SYSTEMS: Sequence[Callable[[Mapping[str, str], Runner], AllocationEnd | None]] = (
    slurm_end, sge_end, pbs_end, lsf_end)


def find_end(end_time: float | None, source: str = "end_time",
             environ: Mapping[str, str] | None = None,
             run: Runner = run_command) -> AllocationEnd | None:
    """The allocation's end: ``end_time`` (the setting, from ``source``) if given, else
    the batch system's word; None when none is known."""
    if end_time is not None:
        return AllocationEnd(end_time, source)
    environ = os.environ if environ is None else environ
    for system in SYSTEMS:
        end = system(environ, run)
        if end is not None:
            return end
    return None
