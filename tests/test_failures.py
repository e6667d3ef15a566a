"""The failure matrix under ``hpcfutures run`` and ``srun``: each fault injected for real.

Each test starts a launch, waits for the client to say READY, injects the
fault (SIGKILL of one rank), and checks the outcome, the time it took, and
that no process is left behind.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from helpers import (
    JOBS,
    MARKER_VAR,
    MPI_LOOPBACK,
    ROOT,
    Lines,
    assert_no_leftovers,
    have_command,
    rank_pid,
    record_failure_time,
    require,
    slurm_is_up,
)
from pace import scaled

RANK_VARS = {"run": "HPCFUTURES_RANK", "srun": "SLURM_PROCID", "mpiexec": "PMI_RANK"}


@pytest.fixture(params=["run", "srun"])
def launcher(request):
    if request.param == "srun":
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    return request.param


class Launch:
    def __init__(self, launcher: str, n: int, job: str, env: dict | None = None,
                 args: tuple[str, ...] = ()):
        self.marker = uuid.uuid4().hex
        self.launcher = launcher
        self.name = f"hpcf-fail-{self.marker[:10]}"
        if launcher == "srun":
            command = ["srun", f"-n{n}", "-J", self.name, sys.executable, str(JOBS / job),
                       *args]
        elif launcher == "mpiexec":
            command = ["mpiexec", "-n", str(n), sys.executable, str(JOBS / job), *args]
            env = {**MPI_LOOPBACK, **(env or {})}
        else:
            command = [sys.executable, "-m", "hpcfutures", "run", "-n", str(n),
                       sys.executable, str(JOBS / job), *args]
        self.process = subprocess.Popen(
            command, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: self.marker,
                 "HPCFUTURES_HOST": "127.0.0.1", **(env or {})})
        self.out, self.err = Lines(self.process.stdout), Lines(self.process.stderr)

    def wait_ready(self, timeout: float = 60) -> None:
        self.out.wait_for("READY", timeout)

    def kill_rank(self, rank: int) -> float:
        os.kill(rank_pid(self.marker, rank, RANK_VARS[self.launcher]), signal.SIGKILL)
        return time.monotonic()

    def finish(self, timeout: float) -> tuple[int, str, str]:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the launch did not end within {timeout} s:\n"
                        f"{self.out.rest()}\n{self.err.rest()}")
        finally:
            if self.launcher == "srun":
                subprocess.run(["scancel", "--name", self.name], capture_output=True,
                               timeout=30)
            assert_no_leftovers(self.marker)
        return self.process.returncode, self.out.rest(), self.err.rest()


@pytest.mark.timeout(90)
def test_client_killed_the_other_ranks_exit_within_30_s(launcher):
    launch = Launch(launcher, 4, "block_job.py", {"HPCFUTURES_TIMEOUT": "30"})
    launch.wait_ready()
    killed_at = launch.kill_rank(1)
    code, _, _ = launch.finish(timeout=60)
    elapsed = time.monotonic() - killed_at
    record_failure_time("client SIGKILLed: other ranks exit", launcher, elapsed)
    assert code != 0
    assert elapsed < scaled(30), f"{elapsed:.1f} s"


@pytest.mark.timeout(90)
def test_scheduler_killed_pending_futures_fail_with_broken_executor(launcher):
    # Every worker joined first: one still starting would wait its whole timeout (30 s)
    # for a scheduler that answers (seen on Python 3.10 under srun, 2 runs in 10).
    launch = Launch(launcher, 4, "block_job.py",
                    {"HPCFUTURES_TIMEOUT": "30", "BLOCK_JOB_WORKERS": "2"})
    launch.wait_ready()
    killed_at = launch.kill_rank(0)
    code, out, err = launch.finish(timeout=60)
    elapsed = time.monotonic() - killed_at
    record_failure_time("scheduler SIGKILLed: BrokenExecutor, all exit", launcher, elapsed)
    assert "CLIENT SAW BrokenHPCExecutor" in out, (out, err)
    assert code != 0
    assert elapsed < scaled(30), (f"{elapsed:.1f} s", out, err)


@pytest.mark.timeout(120)
def test_worker_killed_mid_map_every_result_is_still_correct(launcher):
    launch = Launch(launcher, 5, "map_job.py")
    launch.wait_ready()
    killed_at = launch.kill_rank(2)
    code, out, err = launch.finish(timeout=90)
    record_failure_time("worker SIGKILLed mid-map: all results (map end)", launcher,
                        time.monotonic() - killed_at)
    assert "RESULTS OK" in out, (out, err)
    assert code != 0  # the killed copy failed, and the launcher says so


@pytest.mark.timeout(90)
def test_all_workers_killed_pending_futures_fail_with_broken_executor(launcher):
    deadline = 8
    launch = Launch(launcher, 4, "block_job.py", {"HPCFUTURES_TIMEOUT": str(deadline)})
    launch.wait_ready()
    killed_at = launch.kill_rank(2)
    launch.kill_rank(3)
    code, out, err = launch.finish(timeout=60)
    elapsed = time.monotonic() - killed_at
    record_failure_time("all workers SIGKILLed: BrokenExecutor (timeout=8)", launcher,
                        elapsed)
    assert "CLIENT SAW BrokenHPCExecutor" in out, (out, err)
    assert "no worker" in err, err
    assert code != 0
    assert elapsed < deadline + 10, f"{elapsed:.1f} s"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("rank, role", [(0, "scheduler"), (1, "client"), (2, "worker")])
def test_under_mpiexec_a_killed_rank_ends_the_whole_job_promptly(rank, role):
    """MPI's own rule: when one rank dies, mpiexec ends every rank.  No task
    can be retried there, but nothing hangs and nothing is left behind."""
    require(have_command("mpiexec"), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    launch = Launch("mpiexec", 4, "block_job.py", {"HPCFUTURES_TIMEOUT": "30"})
    launch.wait_ready()
    killed_at = launch.kill_rank(rank)
    code, _, _ = launch.finish(timeout=60)
    elapsed = time.monotonic() - killed_at
    record_failure_time(f"{role} SIGKILLed under mpiexec: job ends", "mpiexec", elapsed)
    assert code != 0
    assert elapsed < scaled(30), f"{elapsed:.1f} s"


@pytest.mark.timeout(90)
def test_sigterm_to_mpiexec_stops_every_rank():
    """The SIGTERM row under MPI (scancel and `hpcfutures run` have theirs in
    test_slurm.py and test_local_launcher.py): Hydra passes the signal on."""
    require(have_command("mpiexec"), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    launch = Launch("mpiexec", 4, "block_job.py", {"HPCFUTURES_TIMEOUT": "30"})
    launch.wait_ready()
    signalled_at = time.monotonic()
    launch.process.send_signal(signal.SIGTERM)
    code, _, _ = launch.finish(timeout=60)
    elapsed = time.monotonic() - signalled_at
    record_failure_time("SIGTERM to the launch", "mpiexec", elapsed)
    assert code != 0
    assert elapsed < scaled(10), f"{elapsed:.1f} s"


#: How long the frozen worker stays stopped (Dask's worker TTL is 5 minutes).
FROZEN = 60


@pytest.mark.timeout(240)
# One launcher is enough: the freeze is the same for every launcher's workers, and
# each run costs a minute of the suite's time budget (srun: the cluster case).
@pytest.mark.parametrize("launcher", ["srun"], indirect=True)
def test_a_worker_frozen_for_a_minute_then_resumed_nothing_hangs(launcher):
    """SIGSTOP, a minute, SIGCONT: the worker is waited for, not dropped, and the map,
    the launch and its status end as if nothing had happened."""
    launch = Launch(launcher, 4, "checked_map_job.py", args=("400", "0.1"))
    launch.out.wait_for("STARTED", 90)
    frozen = rank_pid(launch.marker, 2, RANK_VARS[launcher])
    os.kill(frozen, signal.SIGSTOP)
    try:
        time.sleep(FROZEN)  # the fault itself: a minute without a sign of life
    finally:
        os.kill(frozen, signal.SIGCONT)
    resumed = time.monotonic()
    code, out, err = launch.finish(timeout=90)
    record_failure_time("a worker frozen for 60 s (SIGSTOP), then resumed: map ends",
                        launcher, time.monotonic() - resumed)
    assert "RESULTS OK 400" in out, (out, err)
    assert code == 0, (out, err)
    assert "left the launch" not in err and "Traceback" not in err, err
