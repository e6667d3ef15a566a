"""Dask collections computed on an executor: hpcfutures beside Dask's own schedulers.

    python benchmarks/dask_collections.py                 the table, 3 repeats
    python benchmarks/dask_collections.py --quick         the test suite's smoke run

Each workload is computed with ``dask.compute(..., scheduler=S)`` for S in:
hpcfutures' laptop default (``hpcfutures.Executor(W)``), ``ProcessPoolExecutor(W)``
(Dask accepts any executor), and Dask's own ``"processes"`` scheduler with W
workers; every result is checked against Dask's ``"sync"`` scheduler.  Workloads:

- ``array``: the mean and standard deviation of a random ``dask.array`` in chunks;
- ``dataframe``: a group-by sum of a ``dask.dataframe`` (needs pandas; ``n/a`` without).

The table gives each one's median wall time over ``--repeat`` runs, after one
warm-up compute per scheduler (its workers started, its functions shipped).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np

import hpcfutures


def array_workload(quick: bool) -> Callable[[], Any]:
    side, chunk = (1_000, 250) if quick else (8_000, 1_000)
    x = da.random.RandomState(0).random((side, side), chunks=(chunk, chunk))
    return lambda: (x.mean(), x.std())


def dataframe_workload(quick: bool) -> Callable[[], Any] | None:
    try:
        import dask.dataframe as dd
        import pandas as pd
    except ImportError:
        return None
    rows = 20_000 if quick else 2_000_000
    frame = pd.DataFrame({"k": np.arange(rows) % 97, "v": np.arange(rows, dtype=float)})
    df = dd.from_pandas(frame, npartitions=8 if quick else 32)
    return lambda: (df.groupby("k").v.sum(),)


def timed(scheduler: Any, graphs: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    dask.compute(*graphs(), scheduler=scheduler)  # warm-up
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = dask.compute(*graphs(), scheduler=scheduler)
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "sort_index"):
        return bool(np.allclose(a.sort_index().to_numpy(), b.sort_index().to_numpy()))
    return bool(np.allclose(a, b))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small inputs, one repeat")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    workloads = {"array": array_workload(args.quick),
                 "dataframe": dataframe_workload(args.quick)}
    rows: dict[str, dict[str, str]] = {}
    wrong = []
    with hpcfutures.Executor(args.workers) as ours, \
            cf.ProcessPoolExecutor(args.workers) as pool:
        schedulers = {"hpcfutures": ours, "ProcessPoolExecutor": pool,
                      "dask processes": "processes"}
        for name, graphs in workloads.items():
            rows[name] = {}
            if graphs is None:
                rows[name] = dict.fromkeys(schedulers, "n/a (no pandas)")
                continue
            reference = dask.compute(*graphs(), scheduler="sync")
            for label, scheduler in schedulers.items():
                with dask.config.set(num_workers=args.workers):
                    seconds, result = timed(scheduler, graphs, repeat)
                if not same(result, reference):
                    wrong.append(f"{name} on {label}")
                rows[name][label] = f"{seconds:.3f}"
    labels = ["hpcfutures", "ProcessPoolExecutor", "dask processes"]
    print(f"| workload ({args.workers} workers, median of {repeat}, s) | " + " | ".join(labels)
          + " |")
    print("|---|" + "---|" * len(labels))
    for name, cells in rows.items():
        print(f"| {name} | " + " | ".join(cells[label] for label in labels) + " |")
    if wrong:
        print("WRONG RESULTS: " + ", ".join(wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
