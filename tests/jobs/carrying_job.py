"""The carrying property (tests/carrying.py) under a launcher: the client compares the
launch's executor with a ProcessPoolExecutor of its own."""

import concurrent.futures as cf
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from carrying import check_round_trips

import hpcfutures

with hpcfutures.Executor() as ex, cf.ProcessPoolExecutor(2) as reference:
    check_round_trips(ex, reference, examples=30)
    print("ROUND TRIPS OK", flush=True)
