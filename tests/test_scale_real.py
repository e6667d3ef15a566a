"""The real-ranks harness runs and reports (benchmarks/scale_real.py); speed is never asserted.

Only its ``--quick`` run (12 ranks) under ``hpcfutures run`` and ``mpiexec``: the
150-rank runs and the srun row take minutes and are run by hand
(benchmarks/scale_real.py).
"""

import json
import sys

import pytest
from helpers import MPI_LOOPBACK, ROOT, have_mpi, require, run_job

HARNESS = ROOT / "benchmarks" / "scale_real.py"


@pytest.mark.timeout(90)
def test_quick_run_under_hpcfutures_run_ends_clean_under_a_low_soft_limit(tmp_path):
    results = tmp_path / "results.json"
    job = run_job([sys.executable, HARNESS, "--quick", "--only", "run", "--json", results],
                  timeout=80)
    assert job.returncode == 0, job
    (row,) = json.loads(results.read_text())["rows"]
    assert row["status"] == "ok" and row["left_behind"] == 0, row
    assert row["client_soft_limit"] > 256 and min(row["worker_soft_limits"]) > 256, row
    assert 0 < row["ready"] <= row["first_result"] <= row["last_result"] <= row["returned"]
    assert "| `hpcfutures run` | 12 | ok |" in job.stdout, job


@pytest.mark.timeout(90)
def test_quick_run_under_mpiexec_ends_clean(tmp_path):
    """The row whose ranks get the scheduler's address by MPI broadcast."""
    require(have_mpi(), "MPI (mpiexec and mpi4py)")
    results = tmp_path / "results.json"
    job = run_job([sys.executable, HARNESS, "--quick", "--only", "mpiexec", "--json", results],
                  timeout=80, env=MPI_LOOPBACK)
    assert job.returncode == 0, job
    (row,) = json.loads(results.read_text())["rows"]
    assert row["status"] == "ok" and row["left_behind"] == 0, row
    assert row["client_soft_limit"] > 256 and min(row["worker_soft_limits"]) > 256, row
    assert "| `mpiexec` | 12 | ok |" in job.stdout, job


@pytest.mark.timeout(30)
def test_an_unknown_launcher_is_refused():
    job = run_job([sys.executable, HARNESS, "--only", "run,nope"], timeout=25)
    assert job.returncode == 2 and "unknown launcher(s) nope" in job.stderr, job
