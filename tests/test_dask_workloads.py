"""Dask collections (array, bag, dataframe, xarray with a ``to_zarr`` write) computed with
an executor as their scheduler, under every launcher, equal to Dask's ``sync`` scheduler."""

import pytest


@pytest.mark.timeout(300)
def test_dask_collections_compute_with_the_executor_as_their_scheduler(launcher, launches,
                                                                       tmp_path):
    launch = launches(launcher, 4, "dask_workloads_job.py",
                      env={"HPCFUTURES_TEST_DIR": str(tmp_path)})
    assert launch.finish(240) == 0, launch
    assert "COLLECTIONS OK" in launch.out.rest(), launch
