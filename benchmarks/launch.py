"""Start one benchmark run, time its launcher exactly, and leave no process behind.

::

    launch(argv)  t0 = time.time() -> BENCH_T0 in the environment -> Popen (own session)
                  blocking wait() -> t_return          (a timer kills the run at its deadline)
                  sweep: every process whose environment carries this run's marker is gone,
                  or is killed (srun and mpiexec pass the environment on to every rank, so
                  this also finds ranks that are not our descendants)

Standard output and error go to files rather than pipes, so that a straggler holding them open
cannot delay the moment the launcher is seen to return.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .workload import BENCH_PREFIX, T0_VAR

__all__ = ["MARKER_VAR", "Outcome", "cpu_busy", "launch", "processes_with_marker", "sweep",
           "wait_until_idle"]

MARKER_VAR = "HPCFUTURES_BENCH_MARKER"
#: Seconds between SIGTERM and SIGKILL when a run is ended.
KILL_AFTER = 3.0
#: Seconds a finished run's processes may take to disappear before they are killed.
LINGER = 5.0


@dataclasses.dataclass
class Outcome:
    """What one launched run produced."""

    argv: list[str]
    t0: float
    t_return: float
    returncode: int | None
    timed_out: bool
    bench: dict | None
    stdout: str
    stderr: str
    leftovers: list[str]
    timeout: float

    @property
    def error(self) -> str | None:
        """Why this run does not count, or None when it is good."""
        if self.timed_out:
            return f"timed out after {self.timeout:g} s (killed)"
        if self.bench is None:
            return f"no BENCH line (exit status {self.returncode}): {last_line(self.stderr)}"
        if self.bench.get("errors"):
            return "; ".join(self.bench["errors"])
        if self.returncode != 0:
            return f"exit status {self.returncode}: {last_line(self.stderr)}"
        return None


def last_line(text: str, limit: int = 200) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "(no output)")[:limit]


def launch(argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: str | Path,
           slurm_job_name: str | None = None, linger: float = LINGER) -> Outcome:
    """Run ``argv`` to completion or its deadline; return its timings and output.
    ``linger``: seconds its processes may take to go once the launcher returned."""
    marker = uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="hpcfutures-bench-"))
    env = {**env, MARKER_VAR: marker, "BENCH_TMPDIR": str(workdir)}
    timed_out = threading.Event()
    # scancel with the run's environment: its SLURM_CONF names the cluster the run went to.
    cancel = functools.partial(_scancel, slurm_job_name, env) if slurm_job_name else None
    try:
        with open(workdir / "stdout", "w+b") as out, open(workdir / "stderr", "w+b") as err:
            env[T0_VAR] = repr(t0 := time.time())
            process = subprocess.Popen(list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, start_new_session=True)

            def expire() -> None:
                timed_out.set()
                _end(process, marker, cancel)

            timer = threading.Timer(timeout, expire)
            timer.daemon = True
            timer.start()
            try:
                returncode = process.wait()  # blocking waitpid: no polling delay in t_return
                t_return = time.time()
            except BaseException:  # Ctrl-C: end the run before leaving
                _end(process, marker, cancel)
                raise
            finally:
                timer.cancel()
            leftovers = sweep(marker, cancel, linger)
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode(errors="replace")
            stderr = err.read().decode(errors="replace")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return Outcome(list(argv), t0, t_return, returncode, timed_out.is_set(),
                   _bench_line(stdout), stdout, stderr, leftovers, timeout)


def _bench_line(stdout: str) -> dict | None:
    for line in stdout.splitlines():
        line = re.sub(r"^\[rank \d+ \w+\] ", "", line)  # hpcfutures run tags each line
        if line.startswith(BENCH_PREFIX):
            try:
                return json.loads(line[len(BENCH_PREFIX):])
            except ValueError:
                return None
    return None


# ----------------------------------------------------------------- ending a run
def _end(process: subprocess.Popen, marker: str, cancel: Callable[[], None] | None) -> None:
    """SIGTERM the run's process group (and Slurm job), SIGKILL what is left after a while."""
    if cancel:
        cancel()
    _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + KILL_AFTER
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(process, signal.SIGKILL)
    for pid in processes_with_marker(marker):
        _kill(pid)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _scancel(job_name: str, env: Mapping[str, str]) -> None:
    try:
        subprocess.run(["scancel", "--name", job_name], env=env, timeout=10, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(marker: str, cancel: Callable[[], None] | None = None,
          linger: float = LINGER) -> list[str]:
    """Wait up to ``linger`` s for the run's processes to go; kill and name those that stay."""
    deadline = time.monotonic() + linger
    while True:
        left = processes_with_marker(marker)
        if not left:
            return []
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if cancel:
        cancel()
    for pid in left:
        _kill(pid)
    return [f"{pid} {cmdline}" for pid, cmdline in left.items()]


def cpu_busy(interval: float = 0.5) -> float:
    """Fraction of all CPUs' time spent on anything but idle/iowait over ``interval`` s."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields[:8]) - idle, sum(fields[:8])
    busy0, total0 = sample()
    time.sleep(interval)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_until_idle(limit: float, threshold: float = 0.25) -> float:
    """Sample the CPUs until at most ``threshold`` busy or ``limit`` s passed; the last sample."""
    deadline = time.monotonic() + limit
    while True:
        busy = cpu_busy()
        if busy <= threshold or time.monotonic() >= deadline:
            return busy


def processes_with_marker(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries ``marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie is already dead; its parent reaps it
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        found[int(entry.name)] = cmdline.strip()
    return found
