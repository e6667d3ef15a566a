"""Endings of a launch's executor other than a ``with`` block (issue 15), under any launcher.

    hpcfutures run -n 3 python tests/jobs/ending_job.py MODE

MODE ``exit``: the program never calls shutdown(); ``lost``: the executor is
dropped (``del``) with a call pending.  Either way the pending call must run
and print "PENDING CALL RAN <value>", and the launch must end with status 0.
"""

import sys
import time

import hpcfutures


def slow_square(x):
    time.sleep(1)
    return x * x


def report(future):
    print(f"PENDING CALL RAN {future.result()}", flush=True)


mode = sys.argv[1]
executor = hpcfutures.Executor()
future = executor.submit(slow_square, 7)
future.add_done_callback(report)
if mode == "lost":
    del executor
    future.result(timeout=60)
print(f"CLIENT DONE {mode}", flush=True)
