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

import enum
import logging
import os
import pwd
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from .._errors import AllocationError
from ._batchenv import COMMAND_TIMEOUT
from ._request import Request, format_hms, memory_megabytes, parse_walltime

logger = logging.getLogger("hpcfutures")

__all__ = [
    "LSF",
    "PBS",
    "BatchSystem",
    "GridEngine",
    "JobState",
    "Request",
    "Slurm",
    "format_hms",
    "memory_megabytes",
    "parse_walltime",
]


class JobState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    GONE = "gone"        # finished, cancelled, or never known


# ------------------------------------------------------------------ systems
class BatchSystem:
    """How one batch system is asked for a job, told about it, and rid of it."""

    name: ClassVar[str]
    title: ClassVar[str]
    #: The command whose presence says the system is installed here.
    probe: ClassVar[str]
    #: What starts each directive line: "#SBATCH".
    prefix: ClassVar[str]
    #: Whether one job may have components of different shapes (Slurm's hetjob).
    heterogeneous: ClassVar[bool] = False

    def __init__(self, bin_dir: str | None = None,
                 locate: Callable[[BatchSystem], str | None] | None = None) -> None:
        #: Where its commands are, when not the first of their name on PATH (PBS's
        #: qsub behind Grid Engine's: see _batchfind.py); None: as PATH finds them.
        self.bin_dir = bin_dir
        #: Finds ``bin_dir`` at the first command (not to write a script); may raise.
        self._locate = locate if bin_dir is None and self.probe == "qsub" else None

    def tool(self, name: str) -> str:
        """The command ``name`` of this system: its path when its ``qsub`` is not the
        first on PATH."""
        if self._locate is not None:
            self.bin_dir, self._locate = self._locate(self), None
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
        if request.components and not self.heterogeneous:
            raise AllocationError(
                f"{self.title} has no heterogeneous jobs: allocate(workers=[...]) with several "
                "components works on Slurm only; ask for one shape (nodes=, tasks_per_node=, "
                "gpus=) here")
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
    heterogeneous = True

    def directives(self, request: Request) -> list[str]:
        lines = [self.directive(f"--job-name={request.name}"), *self._shape(request)]
        if request.array:  # the elements share the output file
            lines += [self.directive(f"--array=0-{request.array - 1}"),
                      self.directive("--open-mode=append")]
        if request.output:  # before any hetjob line: the first component runs the script
            lines.append(self.directive(f"--output={request.output}"))
        for component in request.components:  # a heterogeneous job
            lines += [self.directive("hetjob"), *self._shape(component)]
        return lines

    def _shape(self, request: Request) -> list[str]:
        """The lines of one component: its nodes, tasks, time, place, memory, GPUs."""
        d = self.directive
        lines = [d(f"--nodes={request.nodes}"), d(f"--ntasks-per-node={request.tasks_per_node}")]
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
        return lines

    def launcher(self, request: Request) -> str:
        """``srun``; over every component of a heterogeneous job, as one step."""
        return f"srun --het-group=0-{len(request.components)}" if request.components else "srun"

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


def _user() -> str:
    """Who runs this process (not $USER, which ``su`` and ``runuser`` may leave behind)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
