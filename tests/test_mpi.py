"""The MPI plug-in: detection on fake environments, then real ``mpiexec`` and ``srun --mpi=pmi2``.

The unit tests need no MPI.  The real ones use the MPICH wheel's ``mpiexec``
from PATH and mpi4py (``pip install mpi4py mpich``): they skip on a laptop
without them and fail under CI=true.  Every launched job has a deadline and
a leftover-process check (helpers.run_job).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from helpers import (
    ENDING_MODES,
    JOBS,
    MPI_LOOPBACK,
    ROOT,
    contract_passed,
    ending_launch,
    ending_passed,
    have_mpi,
    record_failure_time,
    require,
    run_job,
    slurm_is_up,
)
from pace import scaled

from hpcfutures import LauncherError, StartupTimeoutError
from hpcfutures._launch.plan import negotiate
from hpcfutures._launch.roles import Role
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import SchedulerInfo, _mpi, detect_launcher, mpi
from hpcfutures.launchers.mpi import BroadcastExchange, MPILauncher, declared_size

CONTRACT = JOBS / "contract_job.py"

# --------------------------------------------------------------- environments
#: Rank 2 of `mpiexec -n 4` from the MPICH wheel (Hydra), as measured on this machine.
HYDRA = {"PMI_RANK": "2", "PMI_SIZE": "4", "PMI_FD": "9", "PMI_HOSTNAME": "vm",
         "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"}
#: Task 1 of `srun -n 4` (no --mpi), and of `srun --mpi=pmi2 -n 4`, as measured.
SRUN = {"SLURM_JOB_ID": "29", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1"}
SRUN_PMI2 = {**SRUN, "PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "13", "PMI_JOBID": "29.0",
             "SLURM_MPI_TYPE": "pmi2"}
#: Rank 3 of mpiexec inside a batch script: Hydra's proxy is task 0 of a one-task srun step.
MPIEXEC_IN_SBATCH = {**SRUN, "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1",
                     "SLURM_NTASKS": "1", "PMI_RANK": "3", "PMI_SIZE": "4"}
OPEN_MPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
            "PMIX_RANK": "1", "PMIX_NAMESPACE": "prterun-vm-1234@1"}
SRUN_PMIX = {**SRUN, "PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.29.0"}


def settings(**options):
    return resolve_settings(options, environ={}, dask_config={})


@pytest.fixture
def fake_world(monkeypatch):
    """Make MPILauncher see a COMM_WORLD of our choosing, without MPI."""
    def use(rank, size):
        monkeypatch.setattr(MPILauncher, "_world", lambda self: (rank, size, "FakeMPI 1.0"))
    return use


# ------------------------------------------------------------------ detection
@pytest.mark.parametrize("env, detected", [
    pytest.param(HYDRA, True, id="mpiexec"),
    pytest.param(SRUN_PMI2, True, id="srun-mpi-pmi2"),
    pytest.param(SRUN_PMIX, True, id="srun-mpi-pmix"),
    pytest.param(MPIEXEC_IN_SBATCH, True, id="mpiexec-in-batch-script"),
    pytest.param(OPEN_MPI, True, id="open-mpi-mpirun"),
    pytest.param(SRUN, False, id="plain-srun"),
    pytest.param({}, False, id="laptop"),
])
def test_detection_reads_the_environment_only(env, detected):
    assert bool(MPILauncher.detect(env)) is detected


def test_without_mpi4py_srun_steps_are_left_to_slurm(monkeypatch):
    monkeypatch.setattr(mpi, "_mpi4py_installed", lambda: False)
    assert MPILauncher.detect(SRUN_PMI2) is None
    # mpiexec's ranks are known to MPI only: claim them, and say to install mpi4py
    assert MPILauncher.detect(HYDRA) and MPILauncher.detect(MPIEXEC_IN_SBATCH)


@pytest.mark.parametrize("env, expected", [
    pytest.param(HYDRA, "mpi", id="mpiexec"),
    pytest.param(SRUN_PMI2, "mpi", id="srun-mpi-pmi2"),
    pytest.param(MPIEXEC_IN_SBATCH, "mpi", id="mpiexec-in-batch-script"),
    pytest.param(SRUN, "slurm", id="plain-srun-stays-slurm"),
    pytest.param({**HYDRA, "HPCFUTURES_RANK": "0", "HPCFUTURES_SIZE": "3",
                  "HPCFUTURES_LAUNCH_ID": "x"}, "run", id="hpcfutures-run-wins"),
])
def test_executor_picks_mpi_for_mpi_launches(env, expected):
    cls, reason = detect_launcher(env)
    assert cls.name == expected, reason


def test_detection_and_import_do_not_start_mpi():
    code = ("import sys, hpcfutures\n"
            "from hpcfutures.launchers import detect_launcher\n"
            f"assert detect_launcher({HYDRA!r})[0].name == 'mpi'\n"
            "assert not [m for m in sys.modules if m.startswith('mpi4py')], 'mpi4py imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_an_mpi_start_that_never_returns_ends_the_process_naming_where(tmp_path):
    """MPI_Init runs inside the import of mpi4py.MPI, holding the GIL: a start that
    waits for ever (a process manager that will never answer) must end the rank with
    status 1 and a stack naming the start, not hold the allocation."""
    fake = tmp_path / "mpi4py"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "MPI.py").write_text("import time\ntime.sleep(120)\n")  # a start that hangs
    code = ("import hpcfutures._support.mpi as m\n"
            "m.MPI_START_TIMEOUT = 1\n"
            "m.mpi_module()\n"
            "print('RETURNED')\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=scaled(60),
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), str(ROOT)])})
    assert done.returncode == 1 and "RETURNED" not in done.stdout, done
    assert "Timeout" in done.stderr and "in _start_mpi" in done.stderr, done.stderr
    assert time.monotonic() - started < scaled(30)


def test_declared_size_comes_from_the_launcher():
    assert declared_size(HYDRA) == (4, "PMI_SIZE")
    assert declared_size(SRUN) == (4, "SLURM_STEP_NUM_TASKS")
    assert declared_size(SRUN_PMIX) == (4, "SLURM_STEP_NUM_TASKS")
    assert declared_size(MPIEXEC_IN_SBATCH) == (4, "PMI_SIZE")
    assert declared_size({"SLURM_JOB_ID": "5", "SLURM_NTASKS": "4"}) is None  # batch script


# ------------------------------------------------------------------- identity
def test_identity_comes_from_comm_world(fake_world):
    fake_world(2, 4)
    plan = negotiate(settings(launcher="mpi"), HYDRA)
    identity = plan.identity
    assert (identity.rank, identity.size, plan.role) == (2, 4, Role.WORKER)
    assert identity.single_host and identity.local_rank == 2
    assert identity.launch_id == "mpi-comm-world"
    assert isinstance(plan.exchange, BroadcastExchange)
    assert "MPI broadcast from rank 0" in plan.exchange.description
    assert any("FakeMPI" in reason for reason in identity.reasons)


def test_identity_under_srun_pmi2_uses_the_step(fake_world):
    fake_world(1, 4)
    identity = negotiate(settings(), {**SRUN_PMI2, "SLURM_CPUS_PER_TASK": "2"}).identity
    assert identity.launcher == "mpi" and identity.launch_id == "mpi-29.0"
    assert identity.threads == 2 and identity.single_host


def test_singletons_under_plain_srun_say_to_add_mpi_pmi2(fake_world):
    fake_world(0, 1)
    with pytest.raises(LauncherError, match=r"srun --mpi=pmi2 -n 4 python"):
        negotiate(settings(launcher="mpi"), SRUN)


def test_world_that_does_not_match_the_launcher_is_refused(fake_world):
    fake_world(0, 1)
    with pytest.raises(LauncherError, match=r"PMI_SIZE=4.*FakeMPI 1.0.*mpiexec"):
        negotiate(settings(launcher="mpi"), HYDRA)
    with pytest.raises(LauncherError, match="hpcfutures run"):
        negotiate(settings(launcher="mpi"), {"HPCFUTURES_SIZE": "3"})


def test_a_world_of_one_runs_standalone(fake_world, monkeypatch):
    fake_world(0, 1)
    for name, value in {"PMI_RANK": "0", "PMI_SIZE": "1", "PMI_FD": "9"}.items():
        monkeypatch.setenv(name, value)
    plan = negotiate(settings(launcher="mpi"))
    assert plan.role is Role.STANDALONE and plan.exchange is None
    # its local worker processes must not inherit the rank's PMI connection
    assert "PMI_FD" not in os.environ and "PMI_RANK" not in os.environ


def test_rank_zero_of_mpiexec_in_a_batch_script_is_not_an_srun_task():
    rank0 = {**MPIEXEC_IN_SBATCH, "PMI_RANK": "0"}  # SLURM_PROCID is 0 too, by chance
    assert not mpi.srun_task(rank0) and mpi.job_label(rank0) == "comm-world"
    assert mpi.srun_task(SRUN_PMI2) and mpi.job_label(SRUN_PMI2) == "29.0"


# ----------------------------------------------------------- address exchange
class FakeChannel:
    """Stands in for _mpi.Broadcast: what the root sends, the others receive."""

    root = 0

    def __init__(self, payload=None):
        self.payload, self.receives = payload, 0

    def send(self, payload, deadline):
        if self.payload == "never":
            raise _mpi.DeadlinePassed
        self.payload = payload

    def receive(self, deadline):
        self.receives += 1
        if self.payload is None:
            raise _mpi.DeadlinePassed
        return self.payload


def test_broadcast_carries_address_and_credentials():
    info = SchedulerInfo(address="tls://127.0.0.1:4242", launch_id="mpi-x",
                         security={"tls_ca_file": "-----BEGIN CERTIFICATE-----"})
    channel = FakeChannel()
    BroadcastExchange(channel, rank=0, timeout=5).publish(info)
    got = BroadcastExchange(channel, rank=3, timeout=5).lookup(5)
    assert got == info


def test_the_one_answer_is_handed_out_again_when_not_reachable_yet():
    info = SchedulerInfo(address="tcp://127.0.0.1:1", launch_id="mpi-x")
    channel = FakeChannel(info.to_json().encode())
    exchange = BroadcastExchange(channel, rank=2, timeout=5)
    first = exchange.lookup(5)
    started = time.monotonic()
    assert exchange.lookup(5, stale=first) == first
    assert channel.receives == 1 and time.monotonic() - started < scaled(1.5)


def test_a_scheduler_that_never_broadcasts_is_a_timeout_naming_mpi():
    exchange = BroadcastExchange(FakeChannel(), rank=3, timeout=2)
    with pytest.raises(StartupTimeoutError, match=r"rank 3 waited 2 s .*broadcast over MPI"):
        exchange.lookup(2 - 7e-6)  # what was left of a deadline of 2 s
    with pytest.raises(StartupTimeoutError, match=r"every rank must create the executor"):
        BroadcastExchange(FakeChannel("never"), rank=0, timeout=2).publish(
            SchedulerInfo(address="tcp://127.0.0.1:1", launch_id="mpi-x"))


# ======================================================= real MPI, real Slurm
MPI_ENV = {**MPI_LOOPBACK, "HPCFUTURES_TIMEOUT": "60"}


@pytest.fixture
def real_mpi():
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")


@pytest.fixture
def real_slurm(real_mpi):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")


def mpiexec(n, *args, timeout=90, env=None):
    return run_job(["mpiexec", "-n", str(n), sys.executable, *args],
                   env={**MPI_ENV, **(env or {})}, timeout=timeout)


@pytest.mark.mpi
@pytest.mark.timeout(120)
# Four ranks (two workers); a single worker (three ranks) is tested under hpcfutures run,
# where the roles are negotiated by the same code.
@pytest.mark.parametrize("n", [4])
def test_contract_under_mpiexec(real_mpi, n):
    job = mpiexec(n, CONTRACT)
    assert contract_passed(job, launcher="mpiexec" if n == 4 else None), job
    assert job.stdout.count("CONTRACT RESULT") == 1, "the checks ran on more than one rank"


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", list(ENDING_MODES))
def test_endings_without_a_with_block_under_mpiexec(real_mpi, mode):
    """Issue 15 under mpiexec: no shutdown() (+ submit from atexit), a lost executor,
    cancel_futures, an initializer failing in a worker that joins later."""
    n, env = ending_launch(mode)
    job = mpiexec(n, JOBS / "ending_job.py", mode, env=env, timeout=75)
    assert ending_passed(job, mode), job


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_contract_on_sixteen_oversubscribed_ranks(real_mpi):
    job = mpiexec(16, CONTRACT, timeout=130)
    assert contract_passed(job), job


@pytest.mark.mpi
@pytest.mark.slurm
@pytest.mark.timeout(150)
def test_contract_under_srun_mpi_pmi2(real_slurm):
    job = run_job(["srun", "--mpi=pmi2", "-n4", "-t", "3", sys.executable, CONTRACT],
                  env=MPI_ENV, timeout=130)
    assert contract_passed(job), job


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_executor_under_mpiexec_detects_mpi(real_mpi, tmp_path):
    """`hpcfutures info` on every rank: the MPI plug-in, ranks 0-2, roles, broadcast."""
    job = run_job(["mpiexec", "-n", "3", "sh", "-c",
                   f'{sys.executable} -m hpcfutures info --json > {tmp_path}/$PMI_RANK.json'],
                  env=MPI_ENV, timeout=45)
    assert job.returncode == 0, job
    infos = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(3)]
    assert [(i["launcher"], i["rank"], i["size"], i["role"]) for i in infos] == [
        ("mpi", 0, 3, "scheduler"), ("mpi", 1, 3, "client"), ("mpi", 2, 3, "worker")]
    assert "MPI broadcast" in infos[2]["address_exchange"]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_client_exception_ends_every_rank_promptly(real_mpi):
    """Every rank finalizes when the client leaves its block; the exception then ends
    the client's program (status 1), with no MPI_Abort: nothing was left to abort."""
    job = mpiexec(4, JOBS / "fail_job.py", timeout=45)
    assert job.returncode == 1, job
    assert "RAISING" in job.stdout and "the client failed on purpose" in job.stderr, job
    assert "MPI_Abort" not in job.stderr, job
    assert job.seconds < scaled(10), f"mpiexec took {job.seconds:.1f} s to return"
    record_failure_time("client code raises: launcher returns", "mpiexec", job.seconds)


@pytest.mark.mpi
@pytest.mark.slurm
@pytest.mark.timeout(90)
def test_client_exception_under_srun_mpi_pmi2_ends_the_step(real_slurm):
    job = run_job(["srun", "--mpi=pmi2", "-n4", "-t", "2", sys.executable, JOBS / "fail_job.py"],
                  env=MPI_ENV, timeout=75)
    assert job.returncode == 1, job
    assert "the client failed on purpose" in job.stderr and "MPI_Abort" not in job.stderr, job
    assert job.seconds < scaled(20), f"srun took {job.seconds:.1f} s to return"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_scheduler_that_never_appears_is_a_timeout_not_a_hang(real_mpi):
    """Rank 0 starts MPI but never its executor: the others give up after HPCFUTURES_TIMEOUT."""
    script = ("import os, sys, time\n"
              "if os.environ['PMI_RANK'] == '0':\n"
              "    from mpi4py import MPI\n"
              "    time.sleep(40); sys.exit(0)\n"  # the behaviour: a rank that never serves
              "import hpcfutures\n"
              "hpcfutures.MPIExecutor()\n")
    job = run_job(["mpiexec", "-n", "3", sys.executable, "-c", script],
                  env={**MPI_ENV, "HPCFUTURES_TIMEOUT": "3"}, timeout=45)
    assert job.returncode != 0, job
    assert "StartupTimeoutError" in job.stderr and "broadcast over MPI" in job.stderr, job
    assert job.seconds < scaled(20), f"mpiexec took {job.seconds:.1f} s to return"
    record_failure_time("scheduler never appears (timeout=3 under mpiexec)", "mpiexec",
                        job.seconds)


@pytest.mark.mpi
@pytest.mark.slurm
@pytest.mark.timeout(90)
def test_mpi_executor_under_plain_srun_says_to_add_mpi_pmi2(real_slurm):
    job = run_job(["srun", "-n3", "-t", "2", sys.executable, "-c",
                   "import hpcfutures; hpcfutures.MPIExecutor()"], env=MPI_ENV, timeout=75)
    assert job.returncode != 0, job
    assert job.stderr.count("Add --mpi=pmi2 (srun --mpi=pmi2 -n 3 python") == 3, job


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_mpi_example(real_mpi):
    job = mpiexec(4, ROOT / "examples" / "mpi_montecarlo.py", timeout=75)
    assert job.returncode == 0, job
    # The example maps as soon as one worker has joined: on a loaded machine the other
    # may join after the map, so the ranks are some of the two workers', never others.
    match = re.search(r"pi ~= (\d\.\d+) .* on MPI ranks \[([\d, ]+)\]", job.stdout)
    assert match and abs(float(match.group(1)) - 3.14159) < 0.01, job
    assert set(map(int, match.group(2).split(","))) <= {2, 3}, job
    assert job.stdout.count("pi ~=") == 1, "printed by more than one rank"


@pytest.mark.mpi
@pytest.mark.timeout(90)
# After the launch ended; a rank still joining as it ends is test_faults' ``late=2``.
@pytest.mark.parametrize("delay", [8])
def test_a_worker_that_comes_after_the_end_leaves_with_status_0(real_mpi, delay):
    """Rank 3 starts its executor only after the client is done: MPI would have
    ended the job had the scheduler died, so its silence means "finished"."""
    script = ("import os, sys, time\n"
              "if os.environ['PMI_RANK'] == '3':\n"
              f"    time.sleep({delay})\n"  # the behaviour: a worker that comes this late
              "import hpcfutures\n"
              "with hpcfutures.MPIExecutor() as ex:\n"
              "    print('RESULT', ex.submit(abs, -2).result(), flush=True)\n")
    job = run_job(["mpiexec", "-n", "4", sys.executable, "-c", script],
                  env={**MPI_ENV, "HPCFUTURES_TIMEOUT": "30"}, timeout=75)
    assert job.returncode == 0, job
    assert job.stdout.count("RESULT 2") == 1, job
    assert "Abort" not in job.stderr, job


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("launcher", ["mpiexec", "run"])
def test_a_second_executor_after_the_launch_ended_is_launch_ended_everywhere(real_mpi,
                                                                              launcher):
    """Under mpiexec the first executor's end finalizes MPI; a second Executor() then
    raised LauncherError ("MPI was already finalized") where hpcfutures run and srun
    raise LaunchEndedError.  One class, one explanation, under every launcher."""
    job_file = JOBS / "second_executor_job.py"
    command = (["mpiexec", "-n", "3", sys.executable, job_file] if launcher == "mpiexec"
               else [sys.executable, "-m", "hpcfutures", "run", "-n", "3", sys.executable,
                     job_file])
    job = run_job(command, env=MPI_ENV if launcher == "mpiexec" else None, timeout=60)
    assert job.returncode == 0, job
    assert "SECOND LaunchEndedError: this process already was" in job.stdout, job
