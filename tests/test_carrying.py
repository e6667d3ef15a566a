"""Arguments and functions are carried, never interpreted: ``carrying.py``'s property on
the laptop default (and under ``hpcfutures run``), Dask collections computed with an
executor as their scheduler."""

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


def test_dask_collections_compute_on_the_executor_as_their_scheduler(executors):
    import dask
    import dask.array as da
    import dask.bag as db

    ex, _ = executors
    x = da.random.RandomState(0).random((300, 300), chunks=(100, 100))
    reductions = [x.sum(), (x @ x.T).mean(), x.std(axis=0)]
    ours = dask.compute(*reductions, scheduler=ex)
    reference = dask.compute(*reductions, scheduler="sync")
    for a, b in zip(ours, reference, strict=True):
        assert (abs(a - b) < 1e-9).all()
    with dask.config.set(scheduler=ex):
        bag = db.from_sequence(range(200), npartitions=5).map(lambda v: v * v)
        assert bag.filter(lambda v: v % 3 == 0).sum().compute() == sum(
            v * v for v in range(200) if v * v % 3 == 0)
    assert ex.submit(abs, -3).result(timeout=30) == 3  # still usable


