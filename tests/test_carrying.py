"""Arguments and functions are carried, never interpreted: ``carrying.py``'s property on
the laptop default and under ``hpcfutures run`` (Dask collections computed with an
executor as their scheduler: ``test_dask_workloads.py``)."""

import concurrent.futures as cf

import pytest
from carrying import check_round_trips
from helpers import JOBS, hpcfutures_run

import hpcfutures


@pytest.fixture(scope="module")
def executors():
    with hpcfutures.LocalExecutor(2) as ex, cf.ProcessPoolExecutor(2) as reference:
        yield ex, reference


@pytest.mark.timeout(300)
def test_every_value_round_trips_as_with_a_process_pool(executors):
    check_round_trips(*executors)


@pytest.mark.timeout(300)
def test_every_value_round_trips_under_a_launcher():
    job = hpcfutures_run(4, JOBS / "carrying_job.py", timeout=240)
    assert job.returncode == 0 and "ROUND TRIPS OK" in job.stdout, job
