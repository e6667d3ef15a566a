"""Batch scripts and the queue, one small writer per batch system.

::

    Request (nodes, tasks per node, time, partition, ...)   the same for every system
       -> BatchSystem.script(request, command)             #SBATCH / #$ / #PBS / #BSUB lines
       -> BatchSystem.submit(path)                         sbatch / qsub / bsub: the job id
       -> BatchSystem.state(job)                           pending, running, or gone
       -> BatchSystem.cancel(job)                          scancel / qdel / bkill

Used by ``hpcfutures.allocate`` and ``hpcfutures submit``.  Only text and
commands live here; the waiting (with deadlines) is the caller's.  The job
script records its command's exit status in a file beside its output, so
``submit --wait`` can report it whatever the system's accounting keeps.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import pwd
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import ClassVar

from .._errors import AllocationError
from ._batchenv import COMMAND_TIMEOUT
from ._qsub import find_qsubs

logger = logging.getLogger("hpcfutures")

__all__ = ["BATCH_SYSTEMS", "BatchSystem", "JobState", "Request", "detect_batch_system",
           "format_hms", "get_batch_system", "memory_megabytes", "parse_walltime"]


class JobState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    GONE = "gone"        # finished, cancelled, or never known


# ------------------------------------------------------------------ values
def parse_walltime(value: float | int | str | None) -> int | None:
    """Seconds from ``"[D-]HH:MM:SS"``, ``"MM:SS"`` (as Slurm reads it), seconds, or "90min"."""
    if value is None:
        return None
    if isinstance(value, str) and ":" in value:
        match = re.fullmatch(r"\s*(?:(\d+)-)?(?:(\d+):)?(\d+):(\d{1,2})\s*", value)
        if match is None:
            raise ValueError(f"time: expected [D-]HH:MM:SS or MM:SS, got {value!r}")
        days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    else:
        from .._support.options import to_seconds

        try:
            total = round(to_seconds(value))
        except ValueError as err:
            raise ValueError(f"time: {err}") from None
    if total <= 0:
        raise ValueError(f"time must be greater than 0, got {value!r}")
    return total


def format_hms(seconds: int) -> str:
    """``HH:MM:SS`` (hours may exceed 24), as Grid Engine and PBS read it."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


_UNITS = {"": 1 / 2**20, "b": 1 / 2**20, "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1,
          "g": 1024, "gb": 1024, "t": 2**20, "tb": 2**20}


def memory_megabytes(value: int | str | None) -> int | None:
    """Megabytes (MiB) from bytes or a size such as ``"4GB"``, ``"500M"``, ``"16G"``."""
    if value is None:
        return None
    if isinstance(value, int):
        text = str(value)
    else:
        text = str(value).strip().lower().replace("i", "")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?b?)", text)
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"memory: expected a size such as '4GB' or '500MB', got {value!r}")
    return max(1, round(float(match[1]) * _UNITS[match[2]]))


@dataclasses.dataclass(frozen=True)
class Request:
    """What to ask the batch system for, in its own words nowhere: every system reads it."""

    nodes: int = 1
    tasks_per_node: int = 1
    time: int | None = None             # seconds
    partition: str | None = None         # Slurm partition; Grid Engine, PBS, LSF queue
    account: str | None = None
    memory: int | None = None            # MiB per node
    gpus: int | None = None              # per node
    name: str = "hpcfutures"
    output: str | None = None            # the job's output file (stdout and stderr)
    directives: tuple[str, ...] = ()     # lines passed through unchanged
    array: int | None = None             # a job array of this many elements
    parallel_environment: str | None = None  # Grid Engine only
    workdir: str | None = None

    def __post_init__(self) -> None:
        for name in ("nodes", "tasks_per_node", "gpus", "array"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < (0 if name == "gpus" else 1)):
                raise ValueError(f"{name} must be a whole number greater than 0, got {value!r}")

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node


# ------------------------------------------------------------------ systems
class BatchSystem:
    """How one batch system is asked for a job, told about it, and rid of it."""

    name: ClassVar[str]
    title: ClassVar[str]
    #: The command whose presence says the system is installed here.
    probe: ClassVar[str]
    #: What starts each directive line: "#SBATCH".
    prefix: ClassVar[str]

    def __init__(self, bin_dir: str | None = None) -> None:
        #: Where its commands are, when not the first of their name on PATH (PBS's
        #: qsub behind Grid Engine's: see _qsub.py); None: as PATH finds them.
        self.bin_dir = bin_dir
        self._located = bin_dir is not None or self.probe != "qsub"

    def tool(self, name: str) -> str:
        """The command ``name`` of this system: its path when its ``qsub`` is not the
        first on PATH (looked for at the first command, not to write a script)."""
        if not self._located:
            self.bin_dir = _own_qsub_dir(self)
            self._located = True
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    # --- the script
    def directives(self, request: Request) -> list[str]:
        raise NotImplementedError

    def preamble(self, request: Request) -> list[str]:
        """Commands the script runs before the command (after every directive)."""
        return []

    def launcher(self, request: Request) -> str:
        """What runs the command on every task of the job (``srun``), or ""."""
        return "mpiexec -n {tasks}" if request.tasks > 1 else ""

    def script(self, request: Request, command: Sequence[str] | str,
               status_file: str | None = None, environment: Mapping[str, str] = {}) -> str:
        """The whole batch script: directives, environment, the command under the launcher."""
        lines = ["#!/bin/bash", *self.directives(request), *request.directives,
                 *self.preamble(request)]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in environment.items()]
        if request.workdir:
            lines.append(f"cd {shlex.quote(request.workdir)}")
        text = command if isinstance(command, str) else shlex.join(command)
        launcher = self.launcher(request).format(tasks=request.tasks)
        lines.append(f"{launcher} {text}".strip())
        if status_file:
            lines += ["status=$?", f"echo \"$status\" > {shlex.quote(status_file)}",
                      "exit \"$status\""]
        return "\n".join(lines) + "\n"

    def directive(self, *words: str) -> str:
        return " ".join([self.prefix, *words])

    # --- the queue
    def submit_command(self, path: str) -> list[str]:
        raise NotImplementedError

    def job_id(self, stdout: str) -> str:
        match = re.search(r"\d+", stdout)
        if match is None:
            raise AllocationError(f"{self.title} said {stdout.strip()!r} but gave no job id")
        return match[0]

    def state_command(self, job: str) -> list[str]:
        raise NotImplementedError

    def read_state(self, job: str, result: subprocess.CompletedProcess) -> JobState:
        raise NotImplementedError

    def cancel_command(self, job: str) -> list[str]:
        raise NotImplementedError

    def submit(self, path: str, stdin: str | None = None) -> str:
        """Submit the script at ``path``; its job id, or the system's own refusal."""
        command = self.submit_command(path)
        result = _run(command, f"submit the job ({shlex.join(command)})", stdin=stdin)
        if result.returncode != 0:
            said = (result.stderr.strip() or result.stdout.strip() or "(no message)")
            raise AllocationError(f"{self.title} refused the job ({shlex.join(command)}, "
                                  f"status {result.returncode}): {said}")
        return self.job_id(result.stdout)

    def state(self, job: str) -> JobState | None:
        """Where ``job`` is in the queue; None when the system could not be asked."""
        try:
            result = _run(self.state_command(job), f"ask about job {job}")
        except AllocationError:
            return None
        return self.read_state(job, result)

    def cancel(self, job: str) -> str | None:
        """Cancel ``job``; None if done, else what the system said."""
        try:
            result = _run(self.cancel_command(job), f"cancel job {job}")
        except AllocationError as err:
            return str(err)
        return None if result.returncode == 0 else (result.stderr.strip() or "failed")


def _run(command: list[str], what: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, input=stdin,
                              timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AllocationError(f"could not {what}: no answer within {COMMAND_TIMEOUT:g} s") from None
    except OSError as err:
        raise AllocationError(f"could not {what}: {err}") from err


class Slurm(BatchSystem):
    name, title, probe, prefix = "slurm", "Slurm", "sbatch", "#SBATCH"

    def directives(self, request: Request) -> list[str]:
        d = self.directive
        lines = [d(f"--job-name={request.name}"), d(f"--nodes={request.nodes}"),
                 d(f"--ntasks-per-node={request.tasks_per_node}")]
        if request.time:
            days, rest = divmod(request.time, 86400)
            lines.append(d(f"--time={f'{days}-' if days else ''}{format_hms(rest)}"))
        if request.partition:
            lines.append(d(f"--partition={request.partition}"))
        if request.account:
            lines.append(d(f"--account={request.account}"))
        if request.memory:
            lines.append(d(f"--mem={request.memory}M"))
        if request.gpus:
            lines.append(d(f"--gpus-per-node={request.gpus}"))
        if request.array:  # the elements share the output file
            lines += [d(f"--array=0-{request.array - 1}"), d("--open-mode=append")]
        if request.output:
            lines.append(d(f"--output={request.output}"))
        return lines

    def launcher(self, request: Request) -> str:
        return "srun"

    def submit_command(self, path: str) -> list[str]:
        return ["sbatch", "--parsable", path]

    def job_id(self, stdout: str) -> str:
        return super().job_id(stdout.strip().split(";")[0])

    def state_command(self, job: str) -> list[str]:
        return ["squeue", "-h", "-j", job, "-o", "%T"]

    def read_state(self, job: str, result: subprocess.CompletedProcess) -> JobState:
        states = set(result.stdout.split())
        if result.returncode != 0 and "Invalid job id" not in result.stderr:
            return JobState.PENDING if not states else _worst(states, {"RUNNING"})
        return _worst(states, {"RUNNING", "COMPLETING", "CONFIGURING", "STOPPED",
                               "SUSPENDED", "SIGNALING", "STAGE_OUT"})

    def cancel_command(self, job: str) -> list[str]:
        return ["scancel", job]


def _worst(states: set[str], running: set[str]) -> JobState:
    """Pending while any element still waits, running once all run; gone when none is left."""
    if not states:
        return JobState.GONE
    return JobState.RUNNING if states <= running else JobState.PENDING


class GridEngine(BatchSystem):
    name, title, probe, prefix = "sge", "Grid Engine", "qsub", "#$"

    def directives(self, request: Request) -> list[str]:
        d = self.directive
        lines = [d("-S", "/bin/bash"), d("-N", request.name), d("-V"), d("-j", "y"), d("-cwd")]
        if request.tasks > 1:
            pe = request.parallel_environment or ("smp" if request.nodes == 1 else "mpi")
            lines.append(d("-pe", pe, str(request.tasks)))
        if request.time:
            lines.append(d("-l", f"h_rt={format_hms(request.time)}"))
        if request.partition:
            lines.append(d("-q", request.partition))
        if request.account:
            lines.append(d("-A", request.account))
        if request.memory:  # Grid Engine counts memory per slot
            lines.append(d("-l", f"h_vmem={max(1, request.memory // request.tasks_per_node)}M"))
        if request.gpus:
            lines.append(d("-l", f"gpu={request.gpus}"))
        if request.array:
            lines.append(d("-t", f"1-{request.array}"))
        if request.output:
            lines.append(d("-o", request.output))
        return lines

    def launcher(self, request: Request) -> str:
        # One node: the job script's one process serves on all its slots (hpcfutures
        # starts a worker per slot); across nodes, an MPI launch in the parallel environment.
        return "mpiexec -n {tasks}" if request.nodes > 1 else ""

    def submit_command(self, path: str) -> list[str]:
        return [self.tool("qsub"), "-terse", path]

    def state_command(self, job: str) -> list[str]:
        return [self.tool("qstat"), "-u", _user()]

    def read_state(self, job: str, result: subprocess.CompletedProcess) -> JobState:
        states = set()
        for line in result.stdout.splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[0] == job:
                states.add("RUNNING" if re.fullmatch(r"[rtR]+", fields[4]) else fields[4])
        if result.returncode != 0:
            return JobState.PENDING
        return _worst(states, {"RUNNING"})

    def cancel_command(self, job: str) -> list[str]:
        return [self.tool("qdel"), job]


class PBS(BatchSystem):
    name, title, probe, prefix = "pbs", "PBS", "qsub", "#PBS"

    def directives(self, request: Request) -> list[str]:
        d = self.directive
        chunk = f"select={request.nodes}:ncpus={request.tasks_per_node}" \
                f":mpiprocs={request.tasks_per_node}"
        if request.memory:
            chunk += f":mem={request.memory}mb"
        if request.gpus:
            chunk += f":ngpus={request.gpus}"
        lines = [d("-N", request.name[:15]), d("-V"), d("-j", "oe"), d("-l", chunk)]
        if request.time:
            lines.append(d("-l", f"walltime={format_hms(request.time)}"))
        if request.partition:
            lines.append(d("-q", request.partition))
        if request.account:
            lines.append(d("-A", request.account))
        if request.array and request.array > 1:  # PBS has no array of one
            lines.append(d("-J", f"0-{request.array - 1}"))
        if request.output:
            lines.append(d("-o", request.output))
        return lines

    def preamble(self, request: Request) -> list[str]:
        return ['cd "${PBS_O_WORKDIR:-.}"']

    def submit_command(self, path: str) -> list[str]:
        return [self.tool("qsub"), path]

    def job_id(self, stdout: str) -> str:
        job = stdout.strip()
        if not re.match(r"\d+", job):
            raise AllocationError(f"PBS said {job!r} but gave no job id")
        return job  # "123.server" (or "123[].server"): what qstat and qdel take

    def state_command(self, job: str) -> list[str]:
        return [self.tool("qstat"), "-f", job]

    def read_state(self, job: str, result: subprocess.CompletedProcess) -> JobState:
        match = re.search(r"job_state = (\w)", result.stdout)
        if match is None:
            return JobState.GONE if result.returncode != 0 else JobState.PENDING
        return {"R": JobState.RUNNING, "B": JobState.RUNNING, "E": JobState.RUNNING,
                "F": JobState.GONE, "X": JobState.GONE}.get(match[1], JobState.PENDING)

    def cancel_command(self, job: str) -> list[str]:
        return [self.tool("qdel"), job]


class LSF(BatchSystem):
    name, title, probe, prefix = "lsf", "LSF", "bsub", "#BSUB"

    def directives(self, request: Request) -> list[str]:
        d = self.directive
        name = f"{request.name}[1-{request.array}]" if request.array else request.name
        lines = [d("-J", shlex.quote(name)), d("-n", str(request.tasks)),
                 d("-R", shlex.quote(f"span[ptile={request.tasks_per_node}]"))]
        if request.time:
            lines.append(d("-W", f"{request.time // 3600}:{request.time // 60 % 60:02d}"))
        if request.partition:
            lines.append(d("-q", request.partition))
        if request.account:
            lines.append(d("-P", request.account))
        if request.memory:
            lines.append(d("-R", shlex.quote(f"rusage[mem={request.memory}]")))
        if request.gpus:
            lines.append(d("-gpu", shlex.quote(f"num={request.gpus}")))
        if request.output:
            lines.append(d("-o", request.output))
        return lines

    def submit_command(self, path: str) -> list[str]:
        return ["bsub"]  # reads the script on its standard input, directives included

    def submit(self, path: str, stdin: str | None = None) -> str:
        with open(path) as handle:
            return super().submit(path, stdin=handle.read())

    def state_command(self, job: str) -> list[str]:
        return ["bjobs", "-noheader", "-o", "stat", job]

    def read_state(self, job: str, result: subprocess.CompletedProcess) -> JobState:
        states = set(result.stdout.split()) - {"DONE", "EXIT"}
        if result.returncode != 0 and not result.stdout.strip():
            return JobState.GONE if "not found" in result.stderr else JobState.PENDING
        return _worst(states, {"RUN"})

    def cancel_command(self, job: str) -> list[str]:
        return ["bkill", job]


BATCH_SYSTEMS: dict[str, type[BatchSystem]] = {
    "slurm": Slurm, "sge": GridEngine, "pbs": PBS, "lsf": LSF}


def get_batch_system(name: str) -> BatchSystem:
    try:
        return BATCH_SYSTEMS[name.lower()]()
    except KeyError:
        raise ValueError(f"batch_system must be one of {', '.join(BATCH_SYSTEMS)}, "
                         f"got {name!r}") from None


def _own_qsub_dir(system: BatchSystem, environ: Mapping[str, str] | None = None) -> str | None:
    """The folder of the first ``qsub`` on PATH that is ``system``'s (PBS and Grid Engine
    share the name: see _qsub.py); None to leave it to PATH (none would say whose it is)."""
    qsubs = find_qsubs(environ)
    for path, flavour in qsubs:
        if flavour == system.name:
            return os.path.dirname(path)
    if not qsubs or any(flavour is None for _, flavour in qsubs):
        return None
    hint = "often /opt/pbs/bin" if system.name == "pbs" else "$SGE_ROOT/bin/<arch>"
    raise AllocationError(
        f"batch_system={system.name!r}, but no qsub on PATH is {system.title}'s: "
        f"{_found_here(environ)}. Put {system.title}'s bin directory on PATH ({hint}).")


def detect_batch_system(environ: Mapping[str, str] | None = None) -> BatchSystem:
    """The batch system whose commands are here: sbatch, bsub, then qsub (PBS or Grid
    Engine, as that qsub says).  Where several are, the first of that order is used
    (pass ``batch_system=`` for another); the log names them all."""
    environ = os.environ if environ is None else environ
    found = _systems_here(environ)
    if not found:
        raise AllocationError(
            "no batch system found on this machine (none of sbatch, qsub, bsub is on PATH): "
            "run this on the cluster's login node, or pass batch_system= with its commands "
            "on PATH")
    chosen = found[0][1]
    if len(found) > 1:
        logger.info("several batch systems here (%s): using %s; batch_system= picks another",
                    _found_here(environ), chosen.title)
    return chosen


def _systems_here(environ: Mapping[str, str]) -> list[tuple[str, BatchSystem]]:
    """(where, system) for each batch system whose commands are on PATH, in order of use."""
    path = environ.get("PATH")
    found: list[tuple[str, BatchSystem]] = []
    for kind in (Slurm, LSF):
        where = shutil.which(kind.probe, path=path)
        if where:
            found.append((where, kind()))
    for where, flavour in find_qsubs(environ):
        if flavour is None:  # it would not say: Grid Engine's tools beside it tell
            flavour = "sge" if environ.get("SGE_ROOT") or shutil.which("qconf", path=path) \
                else "pbs"
        if all(other.name != flavour for _, other in found):
            found.append((where, BATCH_SYSTEMS[flavour](bin_dir=os.path.dirname(where))))
    return found


def _found_here(environ: Mapping[str, str] | None) -> str:
    found = _systems_here(os.environ if environ is None else environ)
    if not found:
        return "found none of sbatch, bsub, qsub on PATH"
    return "found " + ", ".join(f"{system.title} ({where})" for where, system in found)


def _user() -> str:
    """Who runs this process (not $USER, which ``su`` and ``runuser`` may leave behind)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
