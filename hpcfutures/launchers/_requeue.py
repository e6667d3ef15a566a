"""Putting a batch job back in the queue, so that its rerun resumes from the journal.

::

    Slurm        scontrol requeue $SLURM_JOB_ID   (a batch job; #SBATCH --requeue)
                 requeues so far: SLURM_RESTART_COUNT
    Grid Engine  the job script exits with status 99 (the job's state becomes Rq)
    PBS          qrerun $PBS_JOBID (operators and managers only); for anyone
                 else, the job's own submission again: qsub with the arguments
                 qstat -f reports, in $PBS_O_WORKDIR (a new job id)
                 requeues so far: HPCFUTURES_REQUEUES, passed on with qsub -v
    LSF          brequeue $LSB_JOBID
                 requeues so far (these three): a counter file per job,
                 ~/.hpcfutures/requeues/<system>-<job id>

A cap (``max_requeues``) stops a job that never gets further from looping.
After a requeue the client leaves with :data:`REQUEUED_STATUS`; under Slurm,
PBS and LSF the batch system ends the job itself at once anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import logging
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._batchenv import run_command

__all__ = ["REQUEUED_STATUS", "RequeueOutcome", "requeue_directive", "requeue_job"]

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


#: The line of a job script that lets its batch system put the job back in the queue.
_DIRECTIVES = {"Slurm": "#SBATCH --requeue", "Grid Engine": "#$ -r y", "PBS": "#PBS -r y",
               "LSF": "#BSUB -r"}


def requeue_directive(environ: Mapping[str, str] | None = None) -> str:
    """What a job script of the batch system this process runs under needs for a requeue
    (``#PBS -r y`` inside a PBS job); outside a batch job, each system's."""
    job = _this_job(os.environ if environ is None else environ)
    if job is not None:
        return _DIRECTIVES[job.system]
    return ", ".join(f"{line} ({system})" for system, line in _DIRECTIVES.items())


def _counter(job: _Job, home: Path) -> Path:
    name = f"{job.system.replace(' ', '')}-{job.job}".replace("/", "_")
    return home / "requeues" / name


def requeue_job(cap: int, then: str = "", environ: Mapping[str, str] | None = None,
                home: Path | None = None, run: Any = run_command,
                added: int | None = None) -> RequeueOutcome:
    """Requeue the batch job this process runs in, unless it made no progress in ``cap``
    runs in a row (or its batch system allows no more requeues).

    ``added``: results this run recorded in its journal (None: no journal, so a
    rerun starts over and no run counts as progress).  A sweep that records new
    results every run is not looping, however many runs it needs: only the runs in
    a row that recorded nothing count against ``cap``.
    Says so before it acts (Slurm ends the job at once): what it does, and ``then``.
    """
    environ = os.environ if environ is None else environ
    job = _this_job(environ)
    if job is None:
        return RequeueOutcome(False, "not requeued: this is not a Slurm, Grid Engine, PBS "
                                     "or LSF batch job (requeue=True needs one)")
    counter = _counter(job, home or Path.home() / ".hpcfutures")
    known = _read_counts(counter)
    # A PBS job resubmitted by an earlier run carries its counts in its environment.
    done = max(job.count if job.count is not None else known["requeues"],
               _carried(environ, REQUEUES_VAR))
    stalled = max(known["stalled"], _carried(environ, STALLED_VAR))
    stalled = 0 if added else stalled + 1
    if stalled > cap:
        return RequeueOutcome(False, f"not requeued: {job.system} job {job.job} recorded no "
                                     f"new result in its last {stalled} runs (max_requeues="
                                     f"{cap} counts the runs in a row without progress); "
                                     "resubmit it to go on once what holds it back is fixed")
    ceiling = _ceiling(job, run)
    if ceiling is not None and done >= ceiling[1]:
        return RequeueOutcome(False, f"not requeued: {ceiling[0]}={ceiling[1]} allows no more "
                                     f"requeues of {job.system} job {job.job} (requeued {done} "
                                     "time(s)); resubmit it to go on")
    progress = _progress(added, stalled, cap)
    if job.system == "PBS":
        return _requeue_pbs(job, done, stalled, progress, then, environ, counter, run)
    how = ("exit status 99" if job.command is None else f"'{' '.join(job.command)}'")
    message = f"requeueing {job.system} job {job.job} ({how}; requeue {done + 1}; {progress})"
    logger.warning("%s%s", message, f": {then}" if then else "")
    if job.command is not None:
        result = run(job.command, f"requeue {job.system} job {job.job}",
                     otherwise="the job ends here; resubmit it to go on"
                     + (" (was it submitted with #SBATCH --requeue, as a batch job?)"
                        if job.system == "Slurm" else ""))
        if result is None:
            return RequeueOutcome(False, f"not requeued: '{' '.join(job.command)}' failed")
    _write_counts(counter, done + 1, stalled)
    return RequeueOutcome(True, message)


def _progress(added: int | None, stalled: int, cap: int) -> str:
    """What this run did for the sweep, in the requeue's line."""
    if added:
        return f"this run recorded {added} new result(s)"
    why = "no journal: a rerun starts over" if added is None else "no new result"
    return (f"{why}, {stalled} run(s) in a row; max_requeues={cap} allows {cap} such runs "
            "in a row")


def _ceiling(job: _Job, run: Any) -> tuple[str, int] | None:
    """The batch system's own cap on requeues, where it has one it tells (Slurm's
    ``MaxBatchRequeue``, 5 by default): (its name, its value)."""
    if job.system != "Slurm":
        return None
    asked = run(("scontrol", "show", "config"), "read Slurm's MaxBatchRequeue",
                level=logging.DEBUG)
    found = re.search(r"^MaxBatchRequeue\s*=\s*(\d+)", asked.stdout if asked else "", re.M)
    return ("Slurm's MaxBatchRequeue", int(found[1])) if found else None


def _carried(environ: Mapping[str, str], name: str) -> int:
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() else 0


#: Requeues so far of a PBS job resubmitted with qsub (which gives it a new job id).
REQUEUES_VAR = "HPCFUTURES_REQUEUES"
#: Its runs in a row that recorded no new result, likewise.
STALLED_VAR = "HPCFUTURES_STALLED_RUNS"


def _requeue_pbs(job: _Job, done: int, stalled: int, progress: str, then: str,
                 environ: Mapping[str, str], counter: Path, run: Any) -> RequeueOutcome:
    """``qrerun`` where PBS allows it (operators and managers); else submit the job again.

    ``qrerun`` ends the job at once, so the message comes before it; a resubmission
    leaves this job running to its end, and its message says which job comes next.
    """
    attempt = f"requeue {done + 1}; {progress}"
    logger.warning("requeueing PBS job %s (%s)%s", job.job, attempt, f": {then}" if then else "")
    assert job.command is not None  # qrerun
    if run(job.command, f"rerun PBS job {job.job}", level=logging.DEBUG) is not None:
        _write_counts(counter, done + 1, stalled)
        return RequeueOutcome(True, f"requeued PBS job {job.job} ('qrerun {job.job}'; "
                                    f"{attempt})")
    submission = _pbs_submission(job.job, environ, run)
    if isinstance(submission, str):
        return RequeueOutcome(False, f"not requeued: 'qrerun {job.job}' was refused (PBS "
                                     f"allows it to operators and managers only) and {submission}")
    workdir, arguments = submission
    again = ("qsub", *_with_variable(arguments,
                                     f"{REQUEUES_VAR}={done + 1},{STALLED_VAR}={stalled}"))
    # qsub reads a relative script path from the submission's own directory.
    result = run(("sh", "-c", 'cd "$0" && exec "$@"', workdir, *again),
                 f"submit PBS job {job.job} again", otherwise="resubmit it to go on")
    if result is None:
        return RequeueOutcome(False, f"not requeued: 'qrerun {job.job}' was refused (PBS "
                                     "allows it to operators and managers only) and "
                                     f"'{' '.join(again)}' in {workdir} failed")
    new_job = result.stdout.strip() or "(no job id given)"
    message = (f"resubmitted PBS job {job.job} as job {new_job} ('{' '.join(again)}' in "
               f"{workdir}: 'qrerun' is for PBS operators and managers; {attempt})")
    logger.warning("%s", message)
    return RequeueOutcome(True, message)


#: qsub options of PBS that take no value; every other option takes one.
_PBS_FLAGS = frozenset({"-f", "-h", "-I", "-V", "-X", "-z", "-G"})


def _pbs_submission(job: str, environ: Mapping[str, str],
                    run: Any) -> tuple[str, list[str]] | str:
    """(directory, qsub arguments) of ``job``'s submission, from ``qstat -f``; or why not."""
    asked = run(("qstat", "-f", "-F", "json", job), f"read how PBS job {job} was submitted",
                level=logging.DEBUG)
    facts: dict[str, Any] = {}
    if asked is not None:
        with contextlib.suppress(ValueError, AttributeError):
            facts = next(iter(json.loads(asked.stdout).get("Jobs", {}).values()), {})
    given = facts.get("Submit_arguments")
    if not isinstance(given, str):
        return f"'qstat -f -F json {job}' did not say how the job was submitted"
    arguments = _submit_arguments(given)
    variables = facts.get("Variable_List")
    workdir = environ.get("PBS_O_WORKDIR") or (
        variables.get("PBS_O_WORKDIR") if isinstance(variables, dict) else None)
    if not workdir:
        return "the job's submission directory (PBS_O_WORKDIR) is unknown"
    if "--" not in arguments and _script_of(arguments) is None:
        return ("the job was submitted through standard input, so there is no script to "
                "submit again: submit a script file (qsub job.sh) to be requeued")
    return workdir, arguments


def _submit_arguments(given: str) -> list[str]:
    """qstat's ``Submit_arguments``: plain words, or (PBS Pro, OpenPBS) JSDL elements."""
    if "<jsdl-hpcpa:Argument>" in given:
        return [html.unescape(word) for word in
                re.findall(r"<jsdl-hpcpa:Argument>(.*?)</jsdl-hpcpa:Argument>", given, re.S)]
    return shlex.split(given)


def _script_of(arguments: list[str]) -> str | None:
    """The script among qsub's arguments (the first word that is no option or its value)."""
    words = iter(arguments)
    for word in words:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
        if word not in _PBS_FLAGS and len(word) == 2:
            next(words, None)  # the option's value
    return None


def _with_variable(arguments: list[str], assignment: str) -> list[str]:
    """``arguments`` with one more variable passed to the job (qsub -v takes one list)."""
    out = list(arguments)
    for i, word in enumerate(out[:-1]):
        if word == "-v":
            out[i + 1] = f"{out[i + 1]},{assignment}"
            return out
    return ["-v", assignment, *out]


def _read_counts(path: Path) -> dict[str, int]:
    """The job's requeues and runs in a row without progress, as its counter file has them
    (a file an earlier version wrote holds the requeues alone)."""
    counts = {"requeues": 0, "stalled": 0}
    try:
        text = path.read_text().strip()
    except OSError:
        return counts
    if text.isdigit():
        counts["requeues"] = int(text)
        return counts
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        found = json.loads(text)
        counts.update({key: int(found.get(key, 0)) for key in counts})
    return counts


def _write_counts(path: Path, requeues: int, stalled: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"requeues": requeues, "stalled": stalled}) + "\n")
    except OSError as err:
        logger.warning("could not count the requeue in %s (%s): max_requeues cannot stop "
                       "a loop of this job", path, err)
