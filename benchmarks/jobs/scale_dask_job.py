"""Dask's own client for ``benchmarks/scale.py``: the same phases as ``scale_job.py``.

    SCALE_CALLS=6000 SCALE_SECONDS=1.0 SCALE_WORKERS=2000 \\
        python benchmarks/jobs/scale_dask_job.py SCHEDULER_FILE CREDENTIALS
"""

import asyncio
import os
import sys
import time
from pathlib import Path

from distributed import Client, wait
from distributed.utils import json_load_robust

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.jobs.scale_hosts import CUT_AFTER, dask_security, timed_maps

CALLS = int(os.environ.get("SCALE_CALLS", "300"))
SECONDS = float(os.environ.get("SCALE_SECONDS", "1.0"))
IDLE = float(os.environ.get("SCALE_IDLE", "0"))
WORKERS = int(os.environ["SCALE_WORKERS"])


def work(x):
    time.sleep(SECONDS)
    return x * x


THROUGHPUT = timed_maps(os.environ.get("SCALE_THROUGHPUT", ""))


def nap(x, seconds):
    time.sleep(seconds)
    return x


def say(what, *more):
    print(what, repr(time.time()), *more, flush=True)


scheduler_file, credentials = sys.argv[1], Path(sys.argv[2])
# Dask's scheduler writes its file in place, and its Client gives up a file that is
# not whole after 0.1 s: read it as Dask's workers do, until it is whole.
address = json_load_robust(scheduler_file, timeout=60)["address"]
client = Client(address, security=dask_security(credentials), timeout=60)
client.wait_for_workers(WORKERS, timeout=600)
say("READY")
# Every worker joined and idle: what the launch costs doing nothing.
time.sleep(IDLE)
say("IDLE")
began = time.time()
assert client.gather(client.map(work, range(CALLS), pure=False)) == [n * n for n in range(CALLS)]
say("WARM", time.time() - began)
for per_worker, seconds in THROUGHPUT:  # one task per call: Dask's own way
    calls, ideal = per_worker * WORKERS, per_worker * seconds
    began = time.time()
    futures = client.map(nap, range(calls), seconds=seconds, pure=False)
    # Given up at CUT_AFTER times the ideal (the harness's deadline allows it):
    # 100,000 tasks at Dask's rate here would take many minutes.
    try:  # distributed's wait raises at its timeout, where concurrent.futures' returns
        wait(futures, timeout=CUT_AFTER * ideal)
    except (TimeoutError, asyncio.TimeoutError):  # not the same class before Python 3.11
        pass
    took = time.time() - began
    done = [future for future in futures if future.done()]
    if len(done) == calls:
        assert client.gather(futures) == list(range(calls))
    client.cancel(futures)
    say("THROUGHPUT", f"{per_worker}x{seconds:g}", took, ideal, len(done) / took,
        "done" if len(done) == calls else f"cut:{len(done)}")
    del futures, done
say("MAPPING")
wrong = 0
futures = client.map(work, range(CALLS), pure=False)
for n, future in enumerate(futures):
    if n == 0:
        future.result()
        say("FIRST")
client.gather(futures)
for n, future in enumerate(futures):
    wrong += future.result() != n * n
say("DONE", wrong)
say("LEAVING")
client.shutdown()
