"""Shared test machinery: backends, waiting, launched jobs, leftover processes, batch jobs.

Test modules import it as ``helpers`` (pytest's ``pythonpath`` in pyproject.toml
puts tests/ on ``sys.path``); conftest.py keeps only pytest's hooks.

A test that needs Slurm or MPI skips on a laptop without them, but under
``CI=true`` a missing backend fails the test: CI must never pass by skipping.
Every launched job runs with a unique marker in its environment; afterwards no
process carrying the marker may remain (srun and mpiexec pass the environment
on, so this also sees ranks that are not our descendants).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pace import scaled
from waiting import wait_until

__all__ = [
    "ENDING_MODES", "FAILURE_TIMES", "FINAL_STATES", "IN_CI", "JOBS", "LAPTOP_WORKERS",
    "LAUNCHERS", "MARKER_VAR", "MATRIX_CHECKS", "MPI_LOOPBACK", "ROOT", "TESTS", "Batch", "Job",
    "Launch", "Lines", "LiveJob", "assert_no_leftovers", "child_pids", "closed_port",
    "contract_passed", "ending_launch", "ending_passed", "have_command", "have_mpi",
    "hpcfutures_run", "http_answers", "job_facts", "kill_marked", "listening",
    "outsider_refused", "outsiders_refused", "own_lines", "package_modules",
    "processes_with_marker", "rank_pid",
    "record_failure_time", "require", "run_job", "slurm_is_up", "wait_until",
]

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
JOBS = TESTS / "jobs"
MARKER_VAR = "HPCFUTURES_TEST_MARKER"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Keep MPI (UCX) and Hydra on loopback, as ci/mpi-check.sh does.
MPI_LOOPBACK = {"UCX_NET_DEVICES": "lo", "HYDRA_IFACE": "lo"}


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (``hpcfutures._dask.spans``; a
    package by its own name), in the order of their paths."""
    found = {}
    for path in sorted((ROOT / "hpcfutures").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


# ------------------------------------------------------------------ backends
def require(available: bool, what: str) -> None:
    """Skip without ``what`` on a laptop; fail under CI=true."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not available "
                    "(.ci/run must install and start it)")
    pytest.skip(f"{what} is not available")


def engine_stub(**parts: Any) -> SimpleNamespace:
    """A stand-in for the engine (the bridge) that one of its parts is built with in a
    unit test: coroutines run on the running loop and nothing else happens, unless a
    keyword replaces that part (``recovery=``, ``sender=``, ``connection_lost=``...)."""
    running: set = set()

    def in_background(awaitable: Any) -> asyncio.Future:
        task = asyncio.ensure_future(awaitable)
        running.add(task)
        task.add_done_callback(running.discard)
        return task

    quiet = SimpleNamespace(lost=lambda *_: False)
    return SimpleNamespace(**{
        "in_background": in_background, "connection_lost": lambda: None, "wake": lambda: None,
        "break_executor": lambda *_: None, "broken": None, "small": lambda: True,
        "recovery": quiet, "early_outcomes": {},
        "send_held_now": lambda _future: None, **parts})


def have_command(name: str) -> bool:
    return shutil.which(name) is not None


def slurm_is_up() -> bool:
    """A Slurm controller answers and its default partition is up (ci/slurm-up.sh)."""
    if not have_command("sinfo") or not have_command("srun"):
        return False
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True,
                                timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0 and "up" in result.stdout.split()


def have_mpi() -> bool:
    """``mpiexec`` on PATH and mpi4py importable (pip install mpi4py mpich)."""
    if not have_command("mpiexec"):
        return False
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


# ------------------------------------------------------- a child's output
def untagged(line: str) -> str:
    """``line`` without the ``[rank N role]`` tag that ``hpcfutures run`` puts before it."""
    return re.sub(r"^\[rank \d+ \w+\] ", "", line)


#: A log record of another library: hpcfutures' format (``[rank N role] LEVEL name:``,
#: which it gives Dask's console handler too) or Dask's own (``- name - LEVEL -``).
FOREIGN_RECORD = re.compile(
    r"\] (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?!hpcfutures\b)[\w.]+: "
    r"| - (?!hpcfutures\b)[\w.]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
#: What Python itself prints of tasks and objects a dying process leaves behind.
TEARDOWN_REPORTS = ("Task exception was never retrieved", "Future exception was never retrieved",
                    "Exception ignored in", "Task was destroyed but it is pending",
                    "Exception in callback")
#: Lines that continue a record: a traceback, its chained parts, its final line.
CONTINUATION = re.compile(r"^(?:\s|Traceback |During handling |The above exception |$"
                          r"|future: |handle: |source_traceback: |object repr: "
                          r"|[\w.]+(?:Error|Exception|Exit|Interrupt)\b)")


def own_lines(text: str) -> str:
    """``text`` without what other libraries (Dask, tornado, asyncio) said in it.

    Their log records go, with the lines that continue them (a traceback), and so
    do Python's reports of tasks a process left behind as it was killed: a test
    asserts what hpcfutures itself and the user's program said, not the silence of
    libraries whose wording changes from release to release.
    """
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        body = untagged(line)
        if FOREIGN_RECORD.search(body) or body.startswith(TEARDOWN_REPORTS):
            skipping = True
        elif not (skipping and CONTINUATION.match(body)):
            skipping = False
            kept.append(line)
    return "\n".join(kept)


class Lines:
    """A child's output stream, read line by line on a thread, so a test can
    wait for a line with a deadline instead of blocking in ``readline``."""

    def __init__(self, stream) -> None:
        self._lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        stream.close()  # at its end: a pipe left to the garbage collector warns
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _nth_with(self, text: str, count: int) -> str | None:
        found = [line for line in self._lines if text in line]
        return found[count - 1] if len(found) >= count else None

    def wait_for(self, text: str, timeout: float, count: int = 1) -> str:
        """The ``count``-th line containing ``text``; fails if the output ends or
        ``timeout`` (stretched by the run's slowdown factor) passes before it."""
        timeout = scaled(timeout)
        with self._changed:
            self._changed.wait_for(
                lambda: self._nth_with(text, count) is not None or self._ended, timeout)
            line, ended = self._nth_with(text, count), self._ended
        if line is not None:
            return line
        why = "the output ended" if ended else f"{timeout:g} s passed"
        times = "" if count == 1 else f" {count} times"
        raise AssertionError(f"{why} before a line with {text!r}{times}:\n{self.text()}")

    def text(self) -> str:
        """Everything read so far."""
        with self._changed:
            return "".join(self._lines)

    def rest(self, timeout: float = 10.0) -> str:
        """Everything, once the output has ended (or after ``timeout`` s: then what came)."""
        self._reader.join(timeout)
        return self.text()


# --------------------------------------------------------- processes left behind
def processes_with_marker(marker: str, **variables: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment carries ``marker``
    (and each ``NAME=value`` of ``variables``)."""
    found = []
    wanted = {f"{MARKER_VAR}={marker}".encode(),
              *(f"{name}={value}".encode() for name, value in variables.items())}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted <= set((entry / "environ").read_bytes().split(b"\0")):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append((int(entry.name), cmdline.strip()))
        except OSError:
            continue
    return found


def kill_marked(marker: str) -> None:
    """SIGKILL every process that carries ``marker``."""
    for pid, _ in processes_with_marker(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_no_leftovers(marker: str, grace: float = 10.0) -> None:
    """Wait up to ``grace`` s for the job's processes to go; kill and fail otherwise."""
    try:
        wait_until(lambda: processes_with_marker(marker), grace, "the job's processes to end",
                   done=lambda left: not left, cap=0.2)
    except AssertionError:
        left = processes_with_marker(marker)
        kill_marked(marker)
        pytest.fail(f"processes left behind after the job: {left}")


def rank_pid(marker: str, rank: int, variable: str = "HPCFUTURES_RANK",
             timeout: float = 10.0) -> int:
    """The pid of the job's process whose ``variable`` (the launcher's rank) is ``rank``."""
    found = wait_until(lambda: processes_with_marker(marker, **{variable: str(rank)}), timeout,
                       f"a process of rank {rank} ({variable}={rank})")
    return found[0][0]


def child_pids(parent: int | None = None) -> set[int]:
    """The children of ``parent`` (default: this process's, e.g. the local workers an
    in-process executor spawned)."""
    me, kids = str(os.getpid() if parent is None else parent), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if handle.read().rsplit(")", 1)[1].split()[1] == me:
                        kids.add(int(entry))
            except (OSError, IndexError):
                continue
    return kids


# --------------------------------------------------------------- launched jobs
class Job:
    """A finished launched job: exit status, output, duration."""

    def __init__(self, command, returncode, stdout, stderr, seconds):
        self.command, self.returncode = command, returncode
        self.stdout, self.stderr, self.seconds = stdout, stderr, seconds

    def __repr__(self) -> str:
        return (f"Job({' '.join(map(str, self.command))!r}, rc={self.returncode}, "
                f"{self.seconds:.1f} s)\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}")


def run_job(command, *, timeout: float = 90, env: dict | None = None,
            check_leftovers: bool = True, cwd=ROOT) -> Job:
    """Run a launcher command with a deadline; its output is shown if a test fails."""
    marker = uuid.uuid4().hex
    full_env = {**os.environ, **(env or {}), MARKER_VAR: marker,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                             os.environ.get("PYTHONPATH")]))}
    timeout = scaled(timeout)
    started = time.monotonic()
    process = subprocess.Popen([str(c) for c in command], env=full_env, cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: srun then ends its step and frees the allocation,
        # where a SIGKILLed srun would leave it running and starve later tests.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        kill_marked(marker)
        pytest.fail(f"job still running after {timeout} s:\n"
                    f"{Job(command, None, stdout, stderr, timeout)!r}")
    job = Job(command, process.returncode, stdout, stderr, time.monotonic() - started)
    print(repr(job))  # pytest shows it when the test fails
    if check_leftovers:
        assert_no_leftovers(marker)
    return job


def hpcfutures_run(n: int, *args, **kwargs) -> Job:
    """``hpcfutures run -n N python ARGS...`` as a user would type it."""
    return run_job([sys.executable, "-m", "hpcfutures", "run", "-n", str(n),
                    sys.executable, *args], **kwargs)


# ------------------------------------------------------------ Slurm batch jobs
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


class LiveJob:
    """A launcher command watched while it runs (its output is read line by line)."""

    def __init__(self, command, env):
        """``command`` is an srun command line; it gets a unique job name (``self.name``)."""
        self.marker = uuid.uuid4().hex
        self.name = f"hpcf-test-{self.marker[:10]}"
        command = [command[0], "-J", self.name, *command[1:]]
        full_env = self.env = {**os.environ, **env, MARKER_VAR: self.marker}
        self.process = subprocess.Popen(command, cwd=ROOT, env=full_env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.output = Lines(self.process.stdout)

    def text(self) -> str:
        return self.output.text()

    def wait_for(self, text, timeout):
        self.output.wait_for(text, timeout)

    def wait(self, timeout) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout} s later:\n{self}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        subprocess.run(["scancel", "--name", self.name], env=self.env,  # its cluster's SLURM_CONF
                       capture_output=True, timeout=30)
        print(self)
        assert_no_leftovers(self.marker, grace=15)

    def __repr__(self) -> str:
        return f"LiveJob rc={self.process.returncode}\n{self.text()}"


def job_facts(job_id) -> dict[str, str]:
    """JobState, ExitCode, JobId and Restarts of a Slurm job, from ``scontrol show job``."""
    result = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                            text=True, timeout=30)
    return dict(re.findall(r"\b(JobState|ExitCode|JobId|Restarts)=(\S+)", result.stdout))


class Batch:
    """Jobs submitted with sbatch by one test; whatever is left is cancelled at the end."""

    def __init__(self, tmp_path, env):
        self.tmp_path, self.marker = tmp_path, uuid.uuid4().hex
        self.env = {**os.environ, **env, MARKER_VAR: self.marker,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                 os.environ.get("PYTHONPATH")]))}
        self.jobs: list[str] = []

    def submit(self, script, *options) -> str:
        path = self.tmp_path / "job.sh"
        path.write_text("#!/bin/bash\n" + script)
        result = subprocess.run(["sbatch", "--parsable", *options, str(path)], cwd=ROOT,
                                env=self.env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        self.jobs.append(result.stdout.strip().split(";")[0])
        return self.jobs[-1]

    def wait(self, job_id, states=FINAL_STATES, timeout=90.0) -> dict[str, str]:
        """Poll ``scontrol show job`` until the job is in one of ``states``."""
        return wait_until(lambda: job_facts(job_id), timeout,
                          f"job {job_id} to reach {' or '.join(sorted(states))}",
                          done=lambda facts: facts.get("JobState") in states,
                          details=self.outputs)

    def outputs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}"
                         for p in sorted(self.tmp_path.glob("*.out")))

    def cancel_all(self) -> None:
        for job in self.jobs:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)


# ---------------------------------------------------------------- the network
def closed_port() -> int:
    """A loopback port nobody listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_OUTSIDER = """
import sys
from distributed import Client, Security
security = Security.temporary() if sys.argv[2] == "other" else None
try:
    Client(sys.argv[1], security=security, timeout=3, set_as_default=False).close()
except Exception:
    print("REFUSED")
else:
    print("CONNECTED")
"""


def outsider_refused(address: str, credentials: str = "none", via: tuple[str, ...] = ()) -> bool:
    """Try to connect a plain Dask client (``credentials``: "none" or "other") to ``address``.

    In a separate process, as another user would, and because a failed
    synchronous Dask client can block in its finaliser; ``via`` is a command
    that starts it elsewhere (``srun -w mn3 -n1``).
    """
    return outsiders_refused([(address, credentials)], via)[0]


def outsiders_refused(attempts: list[tuple[str, str]], via: tuple[str, ...] = ()) -> list[bool]:
    """:func:`outsider_refused` for each (address, credentials), all at once: each attempt
    is a process that imports Dask and may wait out its 3 s connect timeout."""
    children = [subprocess.Popen([*via, sys.executable, "-c", _OUTSIDER, address, credentials],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for address, credentials in attempts]
    refused = []
    try:
        for child in children:
            out, err = child.communicate(timeout=60)
            assert out.strip() in {"REFUSED", "CONNECTED"}, (child.args, out, err)
            refused.append(out.strip() == "REFUSED")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return refused


def listening(pids: list[int]) -> dict[int, list[tuple[str, int]]]:
    """The IPv4 TCP addresses each of ``pids`` listens on, read from /proc (so also in
    another network namespace, such as a node of the 3-node cluster)."""
    found: dict[int, list[tuple[str, int]]] = {}
    for pid in pids:
        try:
            inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
                      for fd in os.listdir(f"/proc/{pid}/fd")}
            table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
        except OSError:
            continue
        found[pid] = []
        for row in table:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # TCP_LISTEN, one of its sockets
                hex_ip, hex_port = fields[1].split(":")
                ip = socket.inet_ntoa(bytes.fromhex(hex_ip)[::-1])
                found[pid].append((ip, int(hex_port, 16)))
    return found


_ASK_HTTP = """
import socket, sys
from concurrent.futures import ThreadPoolExecutor

def ask(address):
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            sock.settimeout(3)
            sock.sendall(b"GET /health HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
            reply = sock.recv(64)
    except OSError:
        reply = b""
    return address + (" HTTP" if reply.startswith(b"HTTP/") else " silent")

# All at once: a silent port costs its 3 s timeout, and MPI's ports are silent.
with ThreadPoolExecutor(max(1, len(sys.argv) - 1)) as pool:
    print("\\n".join(pool.map(ask, sys.argv[1:])))
"""


def http_answers(addresses: list[str], via: tuple[str, ...] = ()) -> list[str]:
    """The ``host:port`` among ``addresses`` where an HTTP server answers, asked from
    another process (started elsewhere with ``via``, e.g. ``srun -w mn3 -n1``)."""
    done = subprocess.run([*via, sys.executable, "-c", _ASK_HTTP, *addresses],
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.split("\n")
    assert done.returncode == 0 and len([x for x in lines if x]) == len(addresses), done
    return [line.split()[0] for line in lines if line.endswith(" HTTP")]


# ------------------------------------------------------- failure-matrix timings
#: Contract checks that are failure-matrix rows, and the row each one times.
MATRIX_CHECKS = {
    "unpicklable_task_fails_on_its_future_and_executor_stays_usable":
        "unpicklable function: its call fails, executor usable",
    "unpicklable_result_fails_only_its_future": "unpicklable result: only its future fails",
}

#: (row, launcher, seconds) measured by the failure tests during this run;
#: conftest.py prints them as a table at the end.
FAILURE_TIMES: list[tuple[str, str, float]] = []


def record_failure_time(row: str, launcher: str, seconds: float) -> None:
    """Note how long a failure-matrix row took; the run ends with a table of them."""
    FAILURE_TIMES.append((row, launcher, seconds))


#: The modes of jobs/ending_job.py (issue 15) and what its client prints when each works.
ENDING_MODES = {
    "exit": ["PENDING CALL RAN 49",
             "ATEXIT REFUSED cannot schedule new futures after interpreter shutdown"],
    "lost": ["PENDING CALL RAN 49"],
    "cancel": ["CANCEL OK"],
    "initfail": ["INITFAIL OK"],
}


def ending_launch(mode: str) -> tuple[int, dict[str, str]]:
    """(ranks, environment) of an ending_job.py launch: ``initfail`` holds rank 3 back
    5 s (a Dask preload), so that it joins once the client has calls pending."""
    if mode != "initfail":
        return 3, {}
    return 4, {"DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{JOBS / "slow_join.py"}"]',
               "HPCFUTURES_TEST_SLOW_RANK": "3", "HPCFUTURES_TEST_SLOW_JOIN": "5"}


def ending_passed(job: Job, mode: str) -> bool:
    """Whether an ending_job.py launch did what ``mode`` asks, and ended with status 0."""
    return (job.returncode == 0 and f"CLIENT DONE {mode}" in job.stdout
            and all(line in job.stdout for line in ENDING_MODES[mode]))


def contract_passed(job: Job, launcher: str | None = None) -> bool:
    """Whether every contract check passed; records the matrix rows' times under ``launcher``."""
    passed = job.returncode == 0 and "CONTRACT RESULT" in job.stdout and "FAIL " not in job.stdout
    if passed and launcher:
        for name, row in MATRIX_CHECKS.items():
            # (hpcfutures run tags the line: [rank 1 client] PASS ...)
            found = re.search(rf"^(?:\[rank \d+ \w+\] )?PASS {name} \(([0-9.]+) s\)",
                              job.stdout, re.MULTILINE)
            if found:
                record_failure_time(row, launcher, float(found.group(1)))
    return passed


# ------------------------------------------- one job under each launcher
LAUNCHERS = ("laptop", "run", "srun", "mpiexec")
#: Local worker processes of the laptop default in these tests.
LAPTOP_WORKERS = 2


class Launch:
    """A job started under ``launcher`` with ``n`` processes (the laptop: one, plus
    its local workers), its output read line by line as it comes."""

    def __init__(self, launcher: str, n: int, job: str, *args: str,
                 env: dict[str, str] | None = None) -> None:
        self.launcher, self.marker = launcher, uuid.uuid4().hex
        self.name = f"hpcf-faults-{self.marker[:10]}"
        script = [sys.executable, str(JOBS / job), *args]
        extra = dict(env or {})
        if launcher == "srun":
            limit = extra.pop("HPCFUTURES_SRUN_TIME", "5")  # minutes
            command = ["srun", f"-n{n}", "-J", self.name, "-t", limit, *script]
        elif launcher == "mpiexec":
            command = ["mpiexec", "-n", str(n), *script]
            extra = {**MPI_LOOPBACK, **extra}
        elif launcher == "run":
            command = [sys.executable, "-m", "hpcfutures", "run", "-n", str(n), *script]
        else:
            command = script
            extra.setdefault("HPCFUTURES_MAX_WORKERS", str(LAPTOP_WORKERS))
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: self.marker, **extra})
        self.out, self.err = Lines(self.process.stdout), Lines(self.process.stderr)

    def ranks(self) -> list[int]:
        """Pids of the job's Python processes (ranks and local workers, not the launchers)."""
        return [pid for pid, command in processes_with_marker(self.marker)
                if os.path.basename(command.split(" ", 1)[0]).startswith("python")
                and " -m hpcfutures run " not in command]

    def launchers(self) -> list[int]:
        """Pids of the job's other processes: srun, mpiexec and its proxies, ``hpcfutures run``."""
        ranks = set(self.ranks())
        return [pid for pid, _ in processes_with_marker(self.marker) if pid not in ranks]

    def finish(self, timeout: float) -> int:
        """The launcher's exit status; fails if it is still running after ``timeout`` s
        (stretched by the run's slowdown factor)."""
        timeout = scaled(timeout)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launch did not end within {timeout:g} s:\n{self}")
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.launcher == "srun":
            subprocess.run(["scancel", "--name", self.name], capture_output=True, timeout=30)
        print(self)  # shown when the test fails
        try:
            assert_no_leftovers(self.marker)
        finally:
            kill_marked(self.marker)

    def __repr__(self) -> str:
        return (f"Launch({self.launcher}) rc={self.process.returncode}\n--- stdout\n"
                f"{self.out.rest(1)}\n--- stderr\n{self.err.rest(1)}")
