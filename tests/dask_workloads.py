"""Dask collections computed with an executor as their scheduler, checked against Dask's
``sync`` scheduler: shared by ``test_dask_workloads.py`` (under every launcher, through
``jobs/dask_workloads_job.py``).

Each workload is what a user of that collection would write: ``dask.compute(...,
scheduler=ex)`` for ``dask.array`` reductions and a ``dask.dataframe`` group-by,
``dask.config.set(scheduler=ex)`` for a ``dask.bag`` pipeline and a dask-backed
``xarray`` dataset, whose ``to_zarr`` write runs on the executor's workers and is read
back.
"""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import xarray as xr


def check_arrays(ex: cf.Executor) -> None:
    x = da.random.RandomState(0).random((300, 300), chunks=(100, 100))
    reductions = [x.sum(), (x @ x.T).mean(), x.std(axis=0)]
    ours = dask.compute(*reductions, scheduler=ex)
    reference = dask.compute(*reductions, scheduler="sync")
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def check_bags(ex: cf.Executor) -> None:
    with dask.config.set(scheduler=ex):
        bag = db.from_sequence(range(200), npartitions=5).map(lambda v: v * v)
        total = bag.filter(lambda v: v % 3 == 0).sum().compute()
    assert total == sum(v * v for v in range(200) if v * v % 3 == 0), total


def check_dataframes(ex: cf.Executor) -> None:
    frame = pd.DataFrame({"k": np.arange(20_000) % 97, "v": np.arange(20_000, dtype=float)})
    df = dd.from_pandas(frame, npartitions=8)
    grouped = df.groupby("k").v.sum()
    (ours,) = dask.compute(grouped, scheduler=ex)
    (reference,) = dask.compute(grouped, scheduler="sync")
    pd.testing.assert_series_equal(ours.sort_index(), reference.sort_index())


def check_xarray(ex: cf.Executor, directory: Path) -> None:
    values = np.random.default_rng(0).random((40, 30, 20))
    ds = xr.Dataset({"t": (("time", "y", "x"), values)},
                    coords={"time": np.arange(40)}).chunk({"time": 10})
    with dask.config.set(scheduler=ex):
        mean = ds.t.mean("time").compute()
        store = directory / "written.zarr"
        ds.to_zarr(store, mode="w")
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(mean.values, ds.t.mean("time").compute().values)
        with xr.open_zarr(store) as back:
            np.testing.assert_array_equal(back.t.values, values)


def check_collections(ex: cf.Executor, directory: Path) -> None:
    """Every workload above on ``ex``; the executor stays usable after them."""
    check_arrays(ex)
    check_bags(ex)
    check_dataframes(ex)
    check_xarray(ex, directory)
    assert ex.submit(abs, -3).result(timeout=30) == 3
