"""Calls that say what they need (issue 28): ``hpcfutures.task(fn, cores=, gpus=, memory=)``.

Unit tests first (the wrapper, the needs, each worker's share of its node's
GPUs, the check at ``submit``), then one job script (jobs/resources_job.py)
that checks every case of the issue, launched for real: on the laptop, under
``hpcfutures run`` and ``mpiexec`` with GPUs declared through
``HPCFUTURES_GPUS``, and under ``srun`` on the local Slurm's GPUs (GRES on
device files ci/slurm-up.sh makes, for which Slurm sets ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys

import cloudpickle
import pytest
from helpers import JOBS, MPI_LOOPBACK, have_mpi, require, run_job, slurm_is_up

import hpcfutures
from hpcfutures import AllocationError, Task, mpi_task, task
from hpcfutures._dask import declared_resources
from hpcfutures._facade.core.tasks import check_fits, needs_of
from hpcfutures._remote import gpus
from hpcfutures._support.config import resolve_settings
from hpcfutures._support.gpus import local_size, node_ranks, share_of, visible_gpus, worker_slot
from hpcfutures._support.needs import Needs, fits
from hpcfutures.launchers._batchscript import PBS, Slurm
from hpcfutures.launchers._request import Request, with_components

JOB = JOBS / "resources_job.py"
FOUR_THREADS = {"HPCFUTURES_THREADS_PER_WORKER": "4", "HPCFUTURES_TIMEOUT": "60"}


def double(x):
    return 2 * x


# ---------------------------------------------------------------- the wrapper
def test_the_wrapper_carries_needs_calls_through_and_pickles():
    wrapped = task(double, gpus=1, memory="2GB")
    assert isinstance(wrapped, Task) and wrapped(4) == 8 and wrapped.__name__ == "double"
    assert wrapped.needs == Needs(gpus=1, memory=2_000_000_000)
    assert repr(wrapped) == "task('double', gpus=1, memory=1.86 GiB)"
    assert pickle.loads(pickle.dumps(wrapped)) == wrapped
    assert cloudpickle.loads(cloudpickle.dumps(task(lambda: 3, cores=2)))() == 3
    assert task(wrapped, cores=4).needs == Needs(cores=4, gpus=1, memory=2_000_000_000)

    @task(cores=2)
    def decorated(x):
        return x + 1

    assert isinstance(decorated, Task) and decorated(1) == 2 and decorated.needs.cores == 2
    assert needs_of(double) is None and needs_of(task(double)) is None
    assert needs_of(decorated) == Needs(cores=2)


def test_needs_survive_functools_partial():
    """``partial(task(f, gpus=1), x)`` keeps the call's needs (the scheduler places it
    by them, the worker holds them): it was a plain call before, on any worker."""
    import functools

    from hpcfutures._facade.core.tasks import needs_of

    wrapped = task(double, gpus=1)
    assert needs_of(functools.partial(wrapped, 2)) == Needs(gpus=1)
    assert needs_of(functools.partial(functools.partial(wrapped), 2)) == Needs(gpus=1)
    assert needs_of(functools.partial(double, 2)) is None


@pytest.mark.parametrize("needs, error, message", [
    ({"gpus": -1}, ValueError, "gpus must be 0 or more, got -1"),
    ({"cores": 1.5}, TypeError, "cores must be an int"),
    ({"gpus": True}, TypeError, "gpus must be an int"),
    ({"memory": "lots"}, ValueError, "memory must be a number of bytes or a size"),
    ({"memory": [1]}, TypeError, "memory must be a number of bytes or a size"),
])
def test_bad_needs_are_refused_when_the_task_is_made(needs, error, message):
    with pytest.raises(error, match=message):
        task(double, **needs)


def test_the_wrapper_refuses_what_is_not_a_plain_function():
    with pytest.raises(TypeError, match="needs a callable"):
        task(3, gpus=1)
    with pytest.raises(TypeError, match=r"mpi_task\(fn, ranks=N, cores="):
        task(mpi_task(double, ranks=2), gpus=1)


def test_mpi_task_takes_the_needs_of_each_rank():
    wrapped = mpi_task(double, ranks=2, gpus=1)
    assert wrapped.needs == Needs(gpus=1) and repr(wrapped) == "mpi_task('double', ranks=2, gpus=1)"
    assert pickle.loads(pickle.dumps(wrapped)) == wrapped
    assert mpi_task(double, ranks=2).needs.resources() is None


def test_needs_are_dask_resources_a_worker_meets_or_not():
    have = declared_resources(4, 4 * 2**30, gpus=1)
    assert have == {"cores": 4.0, "gpus": 1.0, "memory": float(4 * 2**30)}
    assert fits(Needs(cores=4, gpus=1, memory=2**30), have)
    assert not fits(Needs(gpus=2), have) and not fits(Needs(cores=5), have)
    assert Needs.of(cores=0, gpus=0).resources() is None  # zero: nothing asked


def test_submit_refuses_needs_no_worker_meets_naming_both():
    workers = [declared_resources(2, 2**30, 0), declared_resources(4, 2**30, 1)]
    check_fits(Needs(cores=4, gpus=1), lambda: (workers, 2), timeout=1)
    with pytest.raises(ValueError, match=r"asks for gpus=99, but no worker .* the largest has "
                                         r"cores=4, gpus=1, memory=1.00 GiB"):
        check_fits(Needs(gpus=99), lambda: (workers, 2), timeout=1)
    with pytest.raises(ValueError, match=r"asks for 2 ranks with gpus=1 each, but only 1"):
        check_fits(Needs(gpus=1), lambda: (workers, 2), timeout=1, count=2)


def test_submit_waits_for_expected_workers_before_refusing():
    """A worker that has the GPU may still be joining: asked again until all joined."""
    answers = iter([([], 2), ([declared_resources(1, 0, 0)], 2),
                    ([declared_resources(1, 0, 0), declared_resources(1, 0, 1)], 2)])
    check_fits(Needs(gpus=1), lambda: next(answers), timeout=10, patience=0.001)


# ------------------------------------------------------- each worker's GPUs
@pytest.mark.parametrize("environ, index, count, ids, own", [
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 1, 2, ("2", "3"), True),   # a share each
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 0, 1, ("0", "1", "2", "3"), True),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, 4, ("1",), True),           # more workers than GPUs
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 3, 4, ("1",), False),          # pinned, not its own
    ({"CUDA_VISIBLE_DEVICES": "5", "SLURM_GPUS_PER_TASK": "1"}, 3, 4, ("5",), True),
    ({"CUDA_VISIBLE_DEVICES": "1", "SLURMD_TRES_BIND": "gpu:per_task:1"}, 3, 4, ("1",), True),
    ({"SLURM_STEP_GPUS": "6,7"}, 0, 2, ("6",), True),
    ({"ROCR_VISIBLE_DEVICES": "0,1"}, 1, 2, ("1",), True),
    ({"HPCFUTURES_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "3"}, 1, 2, ("1",), True),
    ({"HPCFUTURES_GPUS": "none", "CUDA_VISIBLE_DEVICES": "3"}, 0, 1, (), True),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0, 1, (), True),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0, 1, (), True),
    ({}, 0, 1, (), True),
])
def test_each_worker_owns_its_share_of_the_node_gpus(environ, index, count, ids, own):
    share = share_of(environ, index, count)
    assert (share.ids, share.own) == (ids, own)
    assert share.count == (len(ids) if own else 0)


def test_gpus_are_pinned_through_the_variables_the_launcher_set():
    both = {"CUDA_VISIBLE_DEVICES": "0", "ZE_AFFINITY_MASK": "0"}
    assert visible_gpus(both)[1] == ("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
    assert visible_gpus({"HPCFUTURES_GPUS": "0"})[1:] == (("CUDA_VISIBLE_DEVICES",),
                                                          "HPCFUTURES_GPUS")


def test_a_worker_knows_its_place_among_its_node_workers():
    # Slurm lists the node's ranks: the scheduler (0) and the client (1) are no workers
    assert worker_slot(3, 8, 2, 3, 4, [0, 1, 2, 3], False) == (1, 2)
    assert worker_slot(5, 8, 2, 1, 4, [4, 5, 6, 7], False) == (1, 4)
    assert worker_slot(4, 6, 2, 4, None, None, True) == (2, 4)       # one host: by rank
    assert worker_slot(4, 9, 2, 1, 3, None, False) == (1, 3)         # else: by local rank
    assert node_ranks({"SLURM_GTIDS": "4,5"}, "slurm") == [4, 5]
    assert node_ranks({"SLURM_GTIDS": "4,5"}, "mpi") is None
    assert local_size({"MPI_LOCALNRANKS": "3"}) == 3 and local_size({}) is None


def test_serving_and_joining_workers_split_the_gpus_too():
    from hpcfutures._launch.worker_side import worker_slot_of
    from hpcfutures.launchers._identity import Identity

    settings = resolve_settings({}, environ={}, dask_config={})
    served = Identity(launcher="run", rank=1, size=4, launch_id="x", local_rank=1)
    assert worker_slot_of(settings, served, {}, first_worker=1) == (0, 3)  # no client rank
    joined = Identity(launcher="slurm", rank=0, size=1, launch_id="join-7")
    env = {"SLURM_LOCALID": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2",
           "SLURM_GTIDS": "0,1,2,3"}
    assert worker_slot_of(settings, joined, env) == (2, 4)  # by its place on the node


def test_a_call_holds_gpus_of_its_own_while_it_runs(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    gpus.install(["4", "5"], ["CUDA_VISIBLE_DEVICES"])
    try:
        with gpus.holding(1) as first, gpus.holding(1) as nested:
            assert first == nested == ("4",) == hpcfutures.current_gpus()
        assert task(lambda: (hpcfutures.current_gpus(), os.environ["CUDA_VISIBLE_DEVICES"]),
                    gpus=2)() == (("4", "5"), "4,5")
        assert hpcfutures.current_gpus() == ("4", "5")
    finally:
        gpus.install([], ["CUDA_VISIBLE_DEVICES"])


# ------------------------------------------------------ what the user is shown
def test_the_summary_names_the_gpus_of_each_worker():
    from hpcfutures._reports.summary import CallTally, format_summary

    row = {"host": "127.0.0.1", "threads": 2, "calls": 1, "busy": 1.0, "present": 1.0,
           "lost": False}
    text = format_summary(CallTally(), {"retried": 0, "workers": [
        {**row, "name": "rank-2", "gpus": 2, "needing": 1},
        {**row, "name": "rank-3", "gpus": 0}],
        "needs": {"gpus=1": {"calls": 1, "busy": 1.0}}})
    assert "rank-2 (2 GPUs, 1 with needs)" in text and "rank-3 (" not in text
    assert re.search(r"calls asking gpus=1 +1 +1\.0", text), text


def test_the_ledger_sums_the_calls_of_each_stated_need():
    """What calls used, by what they asked: the scheduler's ledger reads each task's
    resource restrictions as the user wrote them."""
    assert str(Needs.from_resources({"gpus": 1.0})) == "gpus=1"
    assert str(Needs.from_resources({"cores": 4.0, "gpus": 2.0})) == "cores=4, gpus=2"
    assert str(Needs.from_resources({"memory": float(2**30)})).startswith("memory=1")
    for needs in (Needs(cores=2), Needs(gpus=1, memory=2**20)):
        assert Needs.from_resources(needs.resources() or {}) == needs


@pytest.mark.timeout(60)
def test_info_shows_each_rank_its_resources():
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "4", sys.executable, "-m",
                   "hpcfutures", "info"], env={"HPCFUTURES_GPUS": "0,1"}, timeout=45)
    assert "[rank 2 worker] resources: cores=1, GPU 0 of its own (of GPUs 0,1 from " \
           "HPCFUTURES_GPUS)" in job.stdout, job
    assert "[rank 0 scheduler] resources: none (the scheduler runs no calls)" in job.stdout, job


# =========================================================== launched for real
def resources_passed(job) -> bool:
    return job.returncode == 0 and "RESOURCES OK" in job.stdout and "FAILED" not in job.stdout


@pytest.mark.timeout(90)
def test_resources_on_the_laptop():
    """3 local workers, 2 GPUs declared: the third worker has none of its own."""
    env = {**FOUR_THREADS, "HPCFUTURES_GPUS": "0,1", "HPCFUTURES_MAX_WORKERS": "3",
           "HPCFUTURES_SUMMARY": "1"}
    job = run_job([sys.executable, JOB, "3", "2"], env=env, timeout=75)
    assert resources_passed(job), job
    # The summary says what the calls with needs used: 3 x 2 submits and a map of 2 x 2
    # asked gpus=1, 2 x 3 submits cores=4 (the job's counts for 3 workers, 2 GPUs).
    assert re.search(r"calls asking gpus=1 +10 ", job.stderr), job
    assert re.search(r"calls asking cores=4 +6 ", job.stderr), job


@pytest.mark.timeout(90)
def test_a_call_whose_gpu_workers_are_gone_fails_instead_of_waiting(tmp_path):
    job = run_job([sys.executable, JOBS / "stranded_job.py", tmp_path / "holds-the-gpu"],
                  env={"HPCFUTURES_GPUS": "0", "HPCFUTURES_TIMEOUT": "60"}, timeout=75)
    assert "a: WorkerCrashError" in job.stdout and "plain: 5" in job.stdout, job
    assert "b: NoSuitableWorkerError a call asks for gpus=1, but no worker left" in job.stdout, job


@pytest.mark.timeout(90)
def test_resources_under_hpcfutures_run():
    env = {**FOUR_THREADS, "HPCFUTURES_GPUS": "0,1"}
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "5", sys.executable, JOB,
                   "3", "2"], env=env, timeout=75)
    assert resources_passed(job), job


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_resources_under_mpiexec_with_an_mpi_task():
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    env = {**FOUR_THREADS, **MPI_LOOPBACK, "HPCFUTURES_GPUS": "0,1"}
    job = run_job(["mpiexec", "-n", "5", sys.executable, JOB, "3", "2", "mpi"], env=env,
                  timeout=75)
    assert resources_passed(job), job


def slurm_gpus() -> int:
    """GPUs (GRES) of the local Slurm's node: ci/slurm-up.sh gives it some."""
    found = subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True, text=True,
                           timeout=30).stdout
    for part in found.replace(",", " ").split():
        if part.startswith("gpu:"):
            return int(part.split(":")[-1].split("(")[0])
    return 0


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_resources_under_srun_on_slurm_gpus():
    """Slurm sets CUDA_VISIBLE_DEVICES=0,1 for every task of the step: its 4 workers
    split them, two own one each."""
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    require(slurm_gpus() >= 2, "GPUs as GRES on the local Slurm (bash ci/slurm-up.sh)")
    job = run_job(["srun", "-n6", "--gres=gpu:2", "-t", "3", sys.executable, JOB, "4", "2"],
                  env=FOUR_THREADS, timeout=100)
    assert resources_passed(job), job


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_resources_under_srun_with_a_gpu_per_task():
    """--gpus-per-task: Slurm binds each task to its own GPU (the scheduler's and the
    client's go unused)."""
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    require(slurm_gpus() >= 4, "4 GPUs as GRES on the local Slurm (bash ci/slurm-up.sh)")
    job = run_job(["srun", "-n4", "--gpus-per-task=1", "-t", "3", sys.executable, JOB, "2",
                   "2"], env=FOUR_THREADS, timeout=100)
    assert resources_passed(job), job


# ======================================================= heterogeneous jobs
def test_a_heterogeneous_request_is_one_slurm_job_with_a_step_over_all_components():
    request = with_components(Request(time=600, partition="debug", name="mixed"),
                              [{"nodes": 4, "tasks_per_node": 32},
                               {"nodes": 2, "tasks_per_node": 4, "gpus": 4, "memory": "64GB"}])
    assert request.tasks == 136
    script = Slurm().script(request, ["python", "-m", "hpcfutures", "serve"]).splitlines()
    assert script[1:] == [
        "#SBATCH --job-name=mixed", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=32",
        "#SBATCH --time=00:10:00", "#SBATCH --partition=debug",
        "#SBATCH hetjob", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
        "#SBATCH --time=00:10:00", "#SBATCH --partition=debug", "#SBATCH --mem=65536M",
        "#SBATCH --gpus-per-node=4",
        "srun --het-group=0-1 python -m hpcfutures serve"]
    with pytest.raises(AllocationError, match="PBS has no heterogeneous jobs"):
        PBS().script(request, "serve")
    with pytest.raises(ValueError, match=r"workers\[0\]: unknown key\(s\) cpus"):
        with_components(Request(), [{"cpus": 4}])


def test_hpcfutures_submit_writes_a_heterogeneous_job():
    job = run_job([sys.executable, "-m", "hpcfutures", "submit", "--batch-system", "slurm",
                   "--dry-run", "-N", "1", "-n", "3", "--component",
                   "nodes=2,tasks_per_node=4,gpus=4,memory=8GB", "--", "python", "job.py"],
                  timeout=30)
    assert job.returncode == 0, job
    lines = job.stdout.splitlines()
    assert lines.index("#SBATCH hetjob") > max(i for i, line in enumerate(lines)
                                               if line.startswith("#SBATCH --output="))
    assert lines[lines.index("#SBATCH hetjob") + 1:][:4] == [
        "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --mem=8192M",
        "#SBATCH --gpus-per-node=4"], job
    assert "srun --het-group=0-1 python job.py" in lines, job
    bad = run_job([sys.executable, "-m", "hpcfutures", "submit", "--dry-run", "--component",
                   "nodes=two", "--", "python", "job.py"], timeout=30)
    assert bad.returncode == 2 and "'two' is not a whole number" in bad.stderr, bad

