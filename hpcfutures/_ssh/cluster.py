"""What hpcfutures asks of a cluster through SSH: its batch system, its files, its jobs.

The batch system's own plug-in (:mod:`hpcfutures.launchers._batchscript`) still
writes the script and reads the queue's answers; only where its commands run
changes: in one ``sh`` session on the login node each, through the master.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import subprocess
from pathlib import Path
from typing import Any, cast

from .._errors import AllocationError, SchedulerFileError, SSHError
from ..launchers._batchfind import BATCH_SYSTEMS
from ..launchers._batchscript import BatchSystem, JobState
from ..launchers._exchange import SchedulerInfo
from . import shell
from .openssh import SSH, Connection, InterruptedAfter, as_ssh

__all__ = ["Cluster", "RemoteBatch"]

logger = logging.getLogger("hpcfutures")

#: The commands whose presence says which batch system the login node has.
_PROBES = ("sbatch", "bsub", "qsub", "qconf")


class Cluster:
    """A cluster reached through one :class:`Connection`: its home, tools and files."""

    def __init__(self, ssh: str | SSH) -> None:
        self.ssh = as_ssh(ssh)
        self.connection = Connection(self.ssh)
        self.home = ""
        self.hostname = ""
        #: command -> its path on the login node (sbatch, bsub, qsub, qconf).
        self.tools: dict[str, str] = {}

    @property
    def target(self) -> str:
        return self.ssh.target

    def open(self) -> Cluster:
        """Log in (or reuse the master) and look around: home, host, batch commands."""
        self.connection.open()
        try:
            found = self.connection.run(
                ['echo "home $HOME"', 'echo "host $(uname -n)"',
                 *[f"p=$(command -v {name} 2>/dev/null) && echo \"tool {name} $p\""
                   for name in _PROBES], "exit 0"], "look around")
            if found.returncode != 0:
                raise SSHError(f"the setup on {self.target} failed (status {found.returncode}): "
                               f"{found.stderr.strip()}; check SSH(setup=...)")
            for line in found.stdout.splitlines():
                kind, _, rest = line.partition(" ")
                if kind == "home":
                    self.home = rest.strip()
                elif kind == "host":
                    self.hostname = rest.strip()
                elif kind == "tool":
                    name, _, where = rest.partition(" ")
                    self.tools[name] = where.strip()
            if not self.home.startswith("/"):
                raise SSHError(f"{self.target} did not say where your home is "
                               f"(it answered {found.stdout.strip()!r})")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        self.connection.close()

    def path(self, path: str | Any) -> Path:
        """``path`` on the cluster, absolute (``~`` is the remote home)."""
        return Path(shell.remote_path(str(path), self.home))

    # ------------------------------------------------------------ batch system
    def batch_system(self, name: str | None = None) -> RemoteBatch:
        """The batch system on the login node: the one asked for, else the first of
        sbatch, bsub, qsub (Grid Engine when ``qconf`` is beside it, else PBS)."""
        if name is not None:
            try:
                kind = BATCH_SYSTEMS[name.lower()]
            except KeyError:
                raise ValueError(f"batch_system must be one of {', '.join(BATCH_SYSTEMS)}, "
                                 f"got {name!r}") from None
            if kind.probe not in self.tools:
                raise AllocationError(self._no_batch(f"no {kind.probe} for {kind.title}"))
            return RemoteBatch(kind(), self)
        if "sbatch" in self.tools:
            return RemoteBatch(BATCH_SYSTEMS["slurm"](), self)
        if "bsub" in self.tools:
            return RemoteBatch(BATCH_SYSTEMS["lsf"](), self)
        if "qsub" in self.tools:
            flavour = "sge" if "qconf" in self.tools else "pbs"
            return RemoteBatch(BATCH_SYSTEMS[flavour](), self)
        raise AllocationError(self._no_batch("none of sbatch, bsub, qsub"))

    def _no_batch(self, what: str) -> str:
        return (f"no batch system found on {self.target} ({what} on the remote PATH of a "
                "non-interactive ssh session, which loads no modules and no .bash_profile). "
                f"If 'ssh {self.target}' then 'module load slurm' (or similar) is what you do "
                "by hand, pass ssh=hpcfutures.SSH("
                f"{self.target!r}, setup='module load slurm')")

    # ------------------------------------------------------------ files
    def write(self, path: Path, text: str, mode: int = 0o600) -> None:
        done = self.connection.run(shell.file_writer(str(path), text, mode), f"write {path}")
        if done.returncode != 0:
            raise AllocationError(f"could not write {path} on {self.target}: "
                                  f"{done.stderr.strip() or f'status {done.returncode}'}")

    def tail(self, path: Path, lines: int = 15) -> str:
        try:
            done = self.connection.run([f"tail -n {int(lines)} {shlex.quote(str(path))}"],
                                       f"read {path}")
        except SSHError as err:
            return f"(could not read {path} on {self.target}: {err})"
        if done.returncode != 0:
            return f"(no output at {path} on {self.target} yet)"
        return done.stdout.rstrip("\n") or "(empty)"

    def read_scheduler_file(self, path: Path) -> SchedulerInfo | None:
        """The remote scheduler file, as :func:`~hpcfutures.launchers._schedfile.
        read_scheduler_file` reads a local one: yours and 0600, or refused; None while
        absent.  Its credentials stay in this process's memory."""
        try:
            done = self.connection.run(shell.file_reader(str(path)), f"read {path}")
        except SSHError as err:
            raise SchedulerFileError(str(err)) from err
        verdict, text = shell.parse_private(done.stdout, str(path))
        if verdict == "absent":
            return None
        if verdict == "unreadable":
            raise PermissionError(f"{self.target}:{path}")
        if verdict != "ok":
            raise SchedulerFileError(f"refusing scheduler file {self.target}:{path}: {verdict}")
        try:
            return SchedulerInfo.from_json(text)
        except (ValueError, TypeError) as err:
            raise SchedulerFileError(
                f"{self.target}:{path} is not a valid hpcfutures scheduler file ({err}); "
                "remove it or choose another scheduler_file") from err


class RemoteBatch:
    """A batch system whose commands run on the login node: the plug-in's own
    script and answers, its commands sent through :class:`Cluster`."""

    def __init__(self, system: BatchSystem, cluster: Cluster) -> None:
        self.system, self.cluster = system, cluster
        self.name, self.title = system.name, system.title

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system, name)

    def as_batch_system(self) -> BatchSystem:
        """This, typed as what :class:`~hpcfutures._facade.batchjob.Allocation` takes."""
        return cast(BatchSystem, self)

    def script(self, *args: Any, **kwargs: Any) -> str:
        return self.system.script(*args, **kwargs)

    def _run(self, command: list[str], what: str, stdin_from: str | None = None,
             finish: bool = False) -> subprocess.CompletedProcess:
        line = shlex.join(command) + (f" < {shlex.quote(stdin_from)}" if stdin_from else "")
        try:
            return self.cluster.connection.run([line], what, finish=finish)
        except SSHError as err:
            raise AllocationError(str(err)) from err

    def submit(self, path: str, stdin: str | None = None) -> str:
        command = self.system.submit_command(path)
        try:
            done = self._run(command, "submit the job",
                             stdin_from=path if self.name == "lsf" else None, finish=True)
        except InterruptedAfter as stop:  # Ctrl-C: the caller cancels the job it names
            if stop.result.returncode == 0:
                with contextlib.suppress(AllocationError):
                    stop.job = self.system.job_id(stop.result.stdout)
            raise
        if done.returncode == 127:
            raise AllocationError(self.cluster._no_batch(f"{command[0]}: command not found"))
        if done.returncode != 0:
            said = done.stderr.strip() or done.stdout.strip() or "(no message)"
            raise AllocationError(f"{self.title} on {self.cluster.target} refused the job "
                                  f"({shlex.join(command)}, status {done.returncode}): {said}")
        return self.system.job_id(done.stdout)

    def state(self, job: str) -> JobState | None:
        try:
            done = self._run(self.system.state_command(job), f"ask about job {job}")
        except AllocationError:
            return None
        return self.system.read_state(job, done)

    def cancel(self, job: str) -> str | None:
        try:
            done = self._run(self.system.cancel_command(job), f"cancel job {job}")
        except AllocationError as err:
            return str(err)
        return None if done.returncode == 0 else (done.stderr.strip() or "failed")
