"""Shared test machinery: backends, launched jobs, leftover-process checks.

A test that needs Slurm or MPI skips on a laptop without them, but under
``CI=true`` a missing backend fails the test: CI must never pass by skipping.
Every launched job runs with a unique marker in its environment; afterwards no
process carrying the marker may remain (srun and mpiexec pass the environment
on, so this also sees ranks that are not our descendants).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
JOBS = TESTS / "jobs"
MARKER_VAR = "HPCFUTURES_TEST_MARKER"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(available: bool, what: str) -> None:
    """Skip without ``what`` on a laptop; fail under CI=true."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not available "
                    "(.ci/run must install and start it)")
    pytest.skip(f"{what} is not available")


def processes_with_marker(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment carries ``marker``."""
    found = []
    needle = f"{MARKER_VAR}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append((int(entry.name), cmdline.strip()))
        except OSError:
            continue
    return found


def assert_no_leftovers(marker: str, grace: float = 10.0) -> None:
    """Wait up to ``grace`` s for the job's processes to go; kill and fail otherwise."""
    deadline = time.monotonic() + grace
    while True:
        left = processes_with_marker(marker)
        if not left:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    pytest.fail(f"processes left behind after the job: {left}")


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
        for pid, _ in processes_with_marker(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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


#: Contract checks that are failure-matrix rows, and the row each one times.
MATRIX_CHECKS = {
    "unpicklable_task_fails_on_its_future_and_executor_stays_usable":
        "unpicklable function: its call fails, executor usable",
    "unpicklable_result_fails_only_its_future": "unpicklable result: only its future fails",
}


def contract_passed(job: Job, launcher: str | None = None) -> bool:
    """Whether every contract check passed; records the matrix rows' times under ``launcher``."""
    passed = job.returncode == 0 and "CONTRACT RESULT" in job.stdout and "FAIL " not in job.stdout
    if passed and launcher:
        for name, row in MATRIX_CHECKS.items():
            found = re.search(rf"^PASS {name} \(([0-9.]+) s\)", job.stdout, re.MULTILINE)
            if found:
                record_failure_time(row, launcher, float(found.group(1)))
    return passed


# ------------------------------------------------------- failure-matrix timings
#: (row, launcher, seconds) measured by the failure tests during this run.
FAILURE_TIMES: list[tuple[str, str, float]] = []


def record_failure_time(row: str, launcher: str, seconds: float) -> None:
    """Note how long a failure-matrix row took; the run ends with a table of them."""
    FAILURE_TIMES.append((row, launcher, seconds))


def pytest_terminal_summary(terminalreporter) -> None:
    """The failure matrix's measured times, one row per fault, one column per launcher."""
    if not FAILURE_TIMES:
        return
    order = ["laptop", "run", "srun", "mpiexec"]
    launchers = sorted({launcher for _, launcher, _ in FAILURE_TIMES},
                       key=lambda name: (order.index(name) if name in order else 9, name))
    rows: dict[str, dict[str, float]] = {}
    for row, launcher, seconds in FAILURE_TIMES:
        rows.setdefault(row, {})[launcher] = seconds
    write = terminalreporter.write_line
    terminalreporter.section("failure matrix: seconds from the fault to its outcome")
    write("| fault | " + " | ".join(launchers) + " |")
    write("|---|" + "---|" * len(launchers))
    for row, times in rows.items():
        cells = [f"{times[name]:.2f}" if name in times else "" for name in launchers]
        write(f"| {row} | " + " | ".join(cells) + " |")


# ---------------------------------------------------------- shared test helpers
def child_pids() -> set[int]:
    """This process's children (local workers an in-process executor spawned)."""
    me, kids = str(os.getpid()), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if handle.read().rsplit(")", 1)[1].split()[1] == me:
                        kids.add(int(entry))
            except (OSError, IndexError):
                continue
    return kids


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
    done = subprocess.run([*via, sys.executable, "-c", _OUTSIDER, address, credentials],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() in {"REFUSED", "CONNECTED"}, done
    return done.stdout.strip() == "REFUSED"
