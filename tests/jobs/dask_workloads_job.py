"""Dask collections computed on this launch's executor (tests/dask_workloads.py); the
directory for the zarr store is HPCFUTURES_TEST_DIR."""

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dask_workloads import check_collections

import hpcfutures

with hpcfutures.Executor() as ex:
    check_collections(ex, Path(os.environ["HPCFUTURES_TEST_DIR"]))
    print("COLLECTIONS OK", flush=True)
