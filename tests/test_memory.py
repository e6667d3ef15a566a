"""The failure-matrix row "a task exceeds its worker's memory limit".

The task that crosses the limit fails alone with a :class:`TaskMemoryError`
naming the limit; its neighbours and later work still run on the same workers.
Checked in-process on the laptop default and, for real, under ``hpcfutures
run``, ``srun`` and ``mpiexec`` (tests/jobs/memory_job.py).
"""

from __future__ import annotations

import re
import sys
import time

import pytest
from helpers import (
    JOBS,
    MPI_LOOPBACK,
    have_command,
    hpcfutures_run,
    record_failure_time,
    require,
    run_job,
    slurm_is_up,
)
from pace import scaled

import hpcfutures
from hpcfutures._remote import memory as _memory

LIMIT_ENV = {"HPCFUTURES_MEMORY_LIMIT": "700MiB", "HPCFUTURES_HOST": "127.0.0.1"}


def hog(mib):
    return len(bytearray(mib * 2**20)) // 2**20


def raises_unrebuildable():
    raise NeedsTwoArguments("a", "b")


class NeedsTwoArguments(Exception):
    def __init__(self, first, second):
        super().__init__(f"{first}/{second}")


@pytest.mark.timeout(60)
def test_laptop_task_over_the_limit_fails_alone_and_names_the_limit():
    with hpcfutures.Executor(max_workers=2, memory_limit="500MiB") as ex:
        futures = [ex.submit(hog, 4), ex.submit(hog, 1500), ex.submit(hog, 6)]
        started = time.monotonic()
        with pytest.raises(hpcfutures.TaskMemoryError, match=r"memory limit of 500\.0 MiB"):
            futures[1].result(timeout=30)
        record_failure_time("task over its memory limit: that future fails", "laptop",
                            time.monotonic() - started)
        assert futures[0].result(timeout=30) == 4
        assert futures[2].result(timeout=30) == 6
        assert list(ex.map(hog, [1, 2, 3], timeout=30)) == [1, 2, 3]
        with pytest.raises(MemoryError):  # still a MemoryError for existing handlers
            list(ex.map(hog, [1, 1500], timeout=30))


@pytest.mark.timeout(60)
def test_an_exception_that_cannot_be_rebuilt_fails_its_call_with_its_text():
    with hpcfutures.Executor(max_workers=1) as ex:
        future = ex.submit(raises_unrebuildable)
        with pytest.raises(RuntimeError, match=r"NeedsTwoArguments: a/b .*could not be sent back"):
            future.result(timeout=30)
        assert ex.submit(hog, 1).result(timeout=30) == 1


def test_a_limit_below_what_the_process_uses_is_not_enforced(caplog):
    assert _memory.enforce(1 * 2**20) is None
    assert "below what this worker already uses" in caplog.text


def test_without_a_limit_a_memory_error_stays_as_it_is():
    error = MemoryError("plain")
    assert _memory.explain(error) is error


def check(job, launcher):
    assert job.returncode == 0, job
    assert "TASK MEMORY ERROR" in job.stdout and "memory limit of 700.0 MiB" in job.stdout, job
    assert "SMALL 8" in job.stdout, job
    assert "RECOVERED True" in job.stdout, job
    assert "NEIGHBOURS 4 TaskMemoryError 5" in job.stdout, job
    took = re.search(r"TASK MEMORY ERROR after ([0-9.]+) s", job.stdout).group(1)
    record_failure_time("task over its memory limit: that future fails", launcher, float(took))


@pytest.mark.timeout(120)
def test_under_hpcfutures_run():
    check(hpcfutures_run(4, JOBS / "memory_job.py", env=LIMIT_ENV), "run")


@pytest.mark.timeout(120)
def test_under_srun():
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    check(run_job(["srun", "-n4", sys.executable, JOBS / "memory_job.py"], env=LIMIT_ENV), "srun")


@pytest.mark.timeout(120)
def test_under_mpiexec():
    require(have_command("mpiexec"), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    check(run_job(["mpiexec", "-n", "4", sys.executable, JOBS / "memory_job.py"],
                  env={**LIMIT_ENV, **MPI_LOOPBACK}), "mpiexec")


# ------------------------------------------- a limit the worker itself nearly fills
#: Below what a worker process uses before running anything (about 60 MiB).
TOO_SMALL = {"HPCFUTURES_MEMORY_LIMIT": "50MiB", "HPCFUTURES_HOST": "127.0.0.1"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["laptop", "run", "srun"])
def test_a_limit_the_worker_itself_fills_is_a_clear_error_not_a_hang(launcher):
    """Dask pauses a worker above 80 % of its limit: one that starts there would never
    run a task, and the launch waited forever."""
    if launcher == "srun":
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    command = {"laptop": [sys.executable, JOBS / "short_job.py"],
               "run": [sys.executable, "-m", "hpcfutures", "run", "-n", "3", sys.executable,
                       JOBS / "short_job.py"],
               "srun": ["srun", "-n3", sys.executable, JOBS / "short_job.py"]}[launcher]
    job = run_job(command, env={**TOO_SMALL, "HPCFUTURES_MAX_WORKERS": "2"}, timeout=90)
    record_failure_time("memory_limit below what a worker uses: every rank ends, saying why",
                        launcher, job.seconds)
    assert job.returncode != 0 and "CLIENT DONE" not in job.stdout, job
    assert "failed to start: ConfigurationError: memory_limit=50.0 MiB is too small for a " \
           "worker: the worker itself uses" in job.stderr, job
    assert "LauncherError: no worker could start, so the launch ends" in job.stderr, job
    assert job.seconds < scaled(30), job
