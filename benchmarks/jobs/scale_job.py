"""The scheduler's and the client's ranks of ``benchmarks/scale.py``, as a user's script.

Started twice by the harness, as ranks 0 and 1 of an ``hpcfutures run``-style
launch (``HPCFUTURES_RANK``/``SIZE``/``LAUNCH_ID``, the scheduler file in
``HPCFUTURES_SCHEDULER_FILE``); the worker ranks are hosted elsewhere
(``scale_hosts.py``).  Rank 0 serves; rank 1 waits until every worker has
joined, runs a map, and prints when each phase happened (``time.time()``)
for the harness, which kills 10 % of the workers while the first calls run.

    SCALE_CALLS=6000 SCALE_SECONDS=1.0 python benchmarks/jobs/scale_job.py
"""

import os
import sys
import time

import hpcfutures

CALLS = int(os.environ.get("SCALE_CALLS", "300"))
SECONDS = float(os.environ.get("SCALE_SECONDS", "1.0"))
WORKERS = int(os.environ["HPCFUTURES_SIZE"]) - 2


def work(x):
    time.sleep(SECONDS)
    return x * x


def say(what, *more):
    print(what, repr(time.time()), *more, flush=True)


with hpcfutures.Executor() as ex:
    # Only the client gets here.  A benchmark may look inside: how many
    # workers the scheduler has right now is not part of the public API.
    bridge = ex._bridge
    while bridge.workers_now(60) < WORKERS:
        time.sleep(0.05)
    say("READY")
    say("MAPPING")
    wrong = 0
    for n, result in enumerate(ex.map(work, range(CALLS))):
        if n == 0:
            say("FIRST")
        wrong += result != n * n
    say("DONE", wrong)
    say("LEAVING")
sys.exit(0)
