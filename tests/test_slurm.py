"""SlurmExecutor against the real local cluster (ci/slurm-up.sh): srun, sbatch, arrays, scancel.

Skipped on a laptop without Slurm; under CI=true a missing cluster fails.
Sized for 8 Slurm CPUs on 2 real cores: never more than 6 tasks at once.
Every job runs from the repository root with ``python3``, binds to
127.0.0.1 and keeps its scheduler files in the test's temporary directory.
Batch jobs are awaited by polling ``scontrol`` with a deadline; a test that
fails cancels what it submitted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid

import pytest
from helpers import (
    ENDING_MODES,
    JOBS,
    ROOT,
    LiveJob,
    closed_port,
    contract_passed,
    ending_launch,
    ending_passed,
    record_failure_time,
    require,
    run_job,
    slurm_is_up,
)
from pace import scaled

from hpcfutures.launchers import SchedulerInfo

pytestmark = [pytest.mark.slurm]

JOB = "tests/jobs/slurm_job.py"
SUM_100 = sum(x * x for x in range(100))


@pytest.fixture(scope="module", autouse=True)
def slurm():
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")


@pytest.fixture
def env(tmp_path):
    """Loopback, scheduler files under tmp_path, a short start-up deadline."""
    return {"HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
            "HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60",
            "HPCFUTURES_ARRAY_TIMEOUT": "60"}


def srun(n, *args, env, options=(), timeout=90):
    """``srun -nN python3 ARGS`` under a unique job name, cancelled if the test gives up.

    A SIGKILLed srun leaves its allocation running (InactiveLimit=0), which
    would starve every later test of CPUs; ``scancel --name`` prevents that.
    """
    name = f"hpcf-test-{uuid.uuid4().hex[:10]}"
    try:
        return run_job(["srun", f"-n{n}", "-J", name, *options, "python3", *args], env=env,
                       timeout=timeout)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=30)


def left_files(tmp_path):
    """Scheduler files a launch left behind other than its end marker (which names no
    address and holds no credentials: a rank that starts late reads it and exits 0)."""
    left = []
    for path in sorted(tmp_path.glob("sched-*")):
        info = SchedulerInfo.from_json(path.read_text())
        if not (info.finished and not info.address and not info.security):
            left.append(path.name)
    return left


# ------------------------------------------------------------ batch jobs


def cluster_name() -> str:
    result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                            timeout=30)
    match = re.search(r"^ClusterName\s*=\s*(\S+)", result.stdout, re.M)
    return match[1] if match else ""


def write_stale(path, launch_id, **fields) -> None:
    """A scheduler file as an earlier cluster start would have left it."""
    path.write_text(SchedulerInfo(launch_id=launch_id, **fields).to_json())
    path.chmod(0o600)


# ------------------------------------------------------- srun, in the foreground
@pytest.mark.timeout(120)
# Four ranks (two workers); a single worker (three ranks) is tested under hpcfutures run,
# where the roles are negotiated by the same code.
@pytest.mark.parametrize("n", [4])
def test_contract_suite_under_srun(n, env, tmp_path):
    job = srun(n, "tests/jobs/contract_job.py", env=env)
    assert contract_passed(job, launcher="srun" if n == 4 else None), job
    assert left_files(tmp_path) == [], "the scheduler file outlived the launch"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", list(ENDING_MODES))
def test_endings_without_a_with_block_under_srun(mode, env):
    """Issue 15 under srun: no shutdown() (+ submit from atexit), a lost executor,
    cancel_futures, an initializer failing in a worker that joins later."""
    n, extra = ending_launch(mode)
    job = srun(n, "tests/jobs/ending_job.py", mode, env={**env, **extra})
    assert ending_passed(job, mode), job


@pytest.mark.timeout(90)
def test_cpus_per_task_gives_worker_threads(env):
    job = srun(4, JOB, "workers", "2", env={**env, "EXPECT_WORKERS": "2"},
               options=["--cpus-per-task=2"])
    assert job.returncode == 0, job
    assert "WORKERS OK 2" in job.stdout and "'rank-2'" in job.stdout, job


@pytest.mark.timeout(60)
def test_too_few_tasks_fail_at_once_with_advice(env):
    job = srun(2, JOB, "sum", "10", env=env, timeout=45)
    assert job.returncode != 0 and job.seconds < scaled(20), job
    assert "NotEnoughRanksError" in job.stderr and "srun -n3" in job.stderr, job


@pytest.mark.timeout(60)
def test_client_exception_makes_srun_fail_within_10_s(env):
    with LiveJob(["srun", "-n4", "python3", JOB, "raise"], env) as live:
        live.wait_for("RAISING", timeout=40)
        raised = time.monotonic()
        status = live.wait(timeout=30)
        assert status != 0, live
        assert time.monotonic() - raised < scaled(10), live
        record_failure_time("client code raises: launcher returns", "srun",
                            time.monotonic() - raised)
        assert "the client fails on purpose" in live.text(), live


@pytest.mark.timeout(60)
def test_scancel_mid_map_stops_every_rank_within_seconds(env):
    with LiveJob(["srun", "-n4", "python3", JOB, "slow"], env) as live:
        live.wait_for("MAP STARTED", timeout=40)
        job_id = subprocess.run(["squeue", "-h", "-n", live.name, "-o", "%i"],
                                capture_output=True,
                                text=True, timeout=30).stdout.split()
        assert len(job_id) == 1, live
        cancelled = time.monotonic()
        subprocess.run(["scancel", job_id[0]], check=True, timeout=30)
        status = live.wait(timeout=20)
        took = time.monotonic() - cancelled
        assert status != 0 and took < scaled(8), (took, live)
        record_failure_time("SIGTERM to the launch", "srun", took)
        assert "the client received SIGTERM" in live.text(), live
        assert "UNEXPECTED" not in live.text(), live


# --------------------------------------------------------------- sbatch
@pytest.mark.timeout(120)
def test_sbatch_script_runs_standalone_and_with_an_inner_srun(batch, tmp_path):
    """--mem=1000 on 4 CPUs: 250 MiB per local worker of the batch step, and per srun task."""
    job = batch.submit(
        f"EXPECT_WORKERS=4 python3 {JOB} memory 262144000\n"   # the batch step itself
        f"EXPECT_WORKERS=2 srun python3 {JOB} memory 262144000\n",
        "-n4", "--mem=1000", "-o", str(tmp_path / "job.out"))
    facts = batch.wait(job)
    out = (tmp_path / "job.out").read_text()
    assert facts["JobState"] == "COMPLETED" and facts["ExitCode"] == "0:0", out
    # The batch step's lines, then the inner srun's. The executor's own INFO lines (the
    # allocation's end, found in a thread of its own) may fall between any two of them.
    standalone, client, stepped = out.partition("role=client")
    lines = standalone.splitlines()
    assert any("role=standalone" in line for line in lines), out
    assert any(line.startswith("FACTS") and "'local-3'" in line for line in lines), out
    assert "MEMORY OK 4" in lines, out
    assert client and "MEMORY OK 2" in stepped.splitlines(), out
    assert left_files(tmp_path) == [], out


@pytest.mark.timeout(120)
def test_two_srun_steps_in_one_job_do_not_share_a_scheduler_file(batch, tmp_path):
    job = batch.submit(
        f"srun -n3 --exact python3 {JOB} sum 10 &\n"
        f"srun -n3 --exact python3 {JOB} sum 20 &\n"
        "wait\n",
        "-n6", "-o", str(tmp_path / "job.out"))
    facts = batch.wait(job)
    out = (tmp_path / "job.out").read_text()
    assert facts["ExitCode"] == "0:0", out
    assert "SUM 285" in out and "SUM 2470" in out, out
    files = set(re.findall(r"exchange=scheduler file (\S+)", out))
    assert files == {str(tmp_path / f"sched-slurm-{cluster_name()}-{job}.{step}.json")
                     for step in (0, 1)}, out
    assert left_files(tmp_path) == [], out


@pytest.mark.timeout(120)
def test_stale_scheduler_file_with_the_same_job_id_is_ignored(batch, env, tmp_path):
    """A reused job id (fresh slurmctld state) finds the old run's file; it must not matter.

    The stale file names a live process on this host (so only the probe can
    tell) and a closed port; rank 0 starts its scheduler only once another
    rank has logged that it gave up on the stale address.
    """
    batch.env["HPCFUTURES_SCHEDULER_FILE"] = str(tmp_path / "sched-{job_id}.{step_id}.json")
    out = tmp_path / "job.out"
    job = batch.submit(
        "srun -n3 bash -c 'if [ \"$SLURM_PROCID\" = 0 ]; then\n"
        f"  for i in $(seq 300); do grep -qs \"treating it as stale\" {out} && break; "
        "sleep 0.05; done\n"
        f"fi; exec python3 {JOB} sum 100'\n",
        "--hold", "-n3", "-o", str(out))
    launch_id = f"slurm-{cluster_name()}-{job}.0"
    write_stale(tmp_path / f"sched-{job}.0.json", launch_id,
                address=f"tcp://127.0.0.1:{closed_port()}", pid=os.getpid(),
                created=time.time() - 86400)
    subprocess.run(["scontrol", "release", job], check=True, timeout=30)
    facts = batch.wait(job)
    text = out.read_text()
    assert facts["ExitCode"] == "0:0" and f"SUM {SUM_100}" in text, text
    assert "treating it as stale" in text, text
    assert left_files(tmp_path) == [], text


# ------------------------------------------------------------- job arrays
ARRAY_SCRIPT = """
case "$SLURM_ARRAY_TASK_ID" in
  0) # the scheduler starts once the client has seen the old end marker
     for i in $(seq 300); do grep -qs "earlier array" {out}/out_1 && break; sleep 0.05; done ;;
  3) # a worker whose program starts after the client has finished
     for i in $(seq 1200); do [ -e {out}/go ] && break; sleep 0.05; done ;;
esac
exec python3 {job} sum 100
"""


@pytest.mark.timeout(150)
def test_job_array_late_elements_and_pending_ones(batch, tmp_path):
    """sbatch --array=0-4: 0 scheduler, 1 client, 2 worker, 3 starts after the end, 4 held.

    An end marker from an earlier array with the same job id lies in wait and
    must be ignored; the held element must be cancelled by the client; the
    late one must exit 0 at once.
    """
    job = batch.submit(ARRAY_SCRIPT.format(out=tmp_path, job=JOB), "--hold", "--array=0-4",
                       "-o", str(tmp_path / "out_%a"))
    path = tmp_path / f"sched-slurm-{cluster_name()}-{job}-array.json"
    write_stale(path, f"slurm-{cluster_name()}-{job}-array", address="", finished=True,
                created=time.time() - 86400)
    subprocess.run(["scontrol", "release", f"{job}_[0-3]"], check=True, timeout=30)
    client = batch.wait(f"{job}_1")
    assert client["JobState"] == "COMPLETED" and client["ExitCode"] == "0:0", batch.outputs()
    assert f"SUM {SUM_100}" in (tmp_path / "out_1").read_text(), batch.outputs()
    assert "earlier array" in (tmp_path / "out_1").read_text(), batch.outputs()
    assert batch.wait(f"{job}_4", timeout=20)["JobState"] == "CANCELLED"
    assert json.loads(path.read_text())["finished"] is True
    (tmp_path / "go").touch()
    started = time.monotonic()
    late = batch.wait(f"{job}_3", timeout=30)
    assert late["ExitCode"] == "0:0" and time.monotonic() - started < scaled(15), batch.outputs()
    assert "already finished" in (tmp_path / "out_3").read_text(), batch.outputs()
    for element in (0, 2):
        assert batch.wait(f"{job}_{element}")["ExitCode"] == "0:0", batch.outputs()


@pytest.mark.timeout(180)
def test_array_whose_scheduler_element_never_starts_ends_within_a_minute(batch, tmp_path, env):
    """Element 0 (the scheduler) is cancelled while pending: the others, waiting for
    array_timeout (an hour here), ask Slurm, learn why, and end."""
    env["HPCFUTURES_ARRAY_TIMEOUT"] = "3600"
    batch.env.update(env)
    job = batch.submit(f"exec python3 {JOBS / 'short_job.py'}\n", "--hold", "--array=0-3",
                       "-o", str(tmp_path / "out_%a"))
    subprocess.run(["scancel", f"{job}_0"], check=True, timeout=30)
    subprocess.run(["scontrol", "release", f"{job}_[1-3]"], check=True, timeout=30)
    released = time.monotonic()
    for element in (1, 2, 3):
        facts = batch.wait(f"{job}_{element}", timeout=120)
        assert facts["JobState"] == "FAILED", (facts, outputs(tmp_path))
    took = time.monotonic() - released
    record_failure_time("array: scheduler element deleted while pending, others end",
                        "sbatch --array", took)
    assert took < scaled(60), f"{took:.0f} s\n{outputs(tmp_path)}"
    for element in (1, 2, 3):
        text = (tmp_path / f"out_{element}").read_text()
        # CANCELLED, or no record at all (Slurm keeps none for an element it never split
        # off the array's pending record)
        assert re.search(rf"the scheduler's element of job array {job} \(index 0, rank 0\) "
                         r"is (CANCELLED|unknown to Slurm)", text), outputs(tmp_path)
        assert f"this element (rank {element}) stops now" in text, text


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode, client_exit", [("exception", "0:0"), ("uncaught", "1:0")])
def test_an_arrays_status_is_its_clients(batch, tmp_path, mode, client_exit):
    """The client element ends as its program does (a caught exception: 0); the
    scheduler's and the worker's elements end well either way."""
    job = batch.submit(f"exec python3 {JOBS / 'caught_job.py'} {mode}\n", "--array=0-2",
                       "-o", str(tmp_path / "out_%a"))
    codes = {element: batch.wait(f"{job}_{element}")["ExitCode"] for element in (0, 1, 2)}
    assert codes == {0: "0:0", 1: client_exit, 2: "0:0"}, (codes, outputs(tmp_path))
    client = (tmp_path / "out_1").read_text()
    assert ("AFTER THE BLOCK" in client) == (mode == "exception"), client


def outputs(tmp_path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("out_*")))


# ---------------------------------------------------------------- examples
EXAMPLE_RESULT = re.compile(r"integrated sin\(k x\) for 16 values of k on .*largest error")


@pytest.mark.timeout(90)
def test_example_sweep_under_srun(env):
    job = srun(4, "examples/slurm_sweep.py", env=env, timeout=60)
    assert job.returncode == 0, job
    assert len(EXAMPLE_RESULT.findall(job.stdout)) == 1, job
    assert "k= 3  integral=0.666666667  exact=0.666666667" in job.stdout, job


@pytest.mark.timeout(120)
def test_example_batch_script(batch, tmp_path):
    job = batch.submit((ROOT / "examples" / "slurm_job.sh").read_text(),
                       "-o", str(tmp_path / "job.out"))
    facts = batch.wait(job)
    out = (tmp_path / "job.out").read_text()
    assert facts["ExitCode"] == "0:0" and len(EXAMPLE_RESULT.findall(out)) == 1, out


@pytest.mark.timeout(120)
def test_example_array_script(batch, tmp_path):
    job = batch.submit((ROOT / "examples" / "slurm_array.sh").read_text(),
                       "-o", str(tmp_path / "out_%a.out"))
    for element in range(4):
        assert batch.wait(f"{job}_{element}")["ExitCode"] == "0:0", batch.outputs()
    assert len(EXAMPLE_RESULT.findall(batch.outputs())) == 1, batch.outputs()
