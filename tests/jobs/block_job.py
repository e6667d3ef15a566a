"""A job whose client prints READY and then waits on a long task (signal tests)."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import workers_joined

import hpcfutures


def nap(seconds):
    time.sleep(seconds)  # the long task the fault and signal tests interrupt
    return seconds


#: Workers to wait for before READY (0: none).  A test that kills the scheduler
#: needs them all joined: a worker still starting then waits its whole timeout for
#: a scheduler that answers (it cannot tell this launch's dead scheduler from an
#: earlier run's file that a new scheduler is about to replace).
WORKERS = int(os.environ.get("BLOCK_JOB_WORKERS", "0"))

with hpcfutures.Executor() as ex:
    workers_joined(ex, WORKERS)
    print("READY", flush=True)
    try:
        ex.submit(nap, 300).result()
    except BaseException as err:
        print(f"CLIENT SAW {type(err).__name__}", flush=True)
        raise
sys.exit(0)
