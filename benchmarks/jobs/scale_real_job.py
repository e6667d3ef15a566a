"""The job of ``benchmarks/scale_real.py``: an ordinary user's script, run by every rank.

A map of ``SCALE_REAL_CALLS`` calls (each sleeps ``SCALE_REAL_SECONDS``) whose
results are checked; the client prints one ``BENCH {json}`` line with the
moments of the launch (``time.time()``, against ``BENCH_T0``, set by the
harness when it started the launcher): the executor ready, the first result,
the last one.  Every other rank leaves inside ``Executor()``.
"""

import json
import os
import resource
import time

import hpcfutures

CALLS = int(os.environ.get("SCALE_REAL_CALLS", "300"))
SECONDS = float(os.environ.get("SCALE_REAL_SECONDS", "0.05"))
T0 = float(os.environ.get("BENCH_T0", time.time()))


def work(x):
    time.sleep(SECONDS)
    return x * x, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


with hpcfutures.Executor() as ex:
    ready = time.time()
    first = None
    wrong, soft_limits = 0, set()
    for i, (square, soft) in enumerate(ex.map(work, range(CALLS))):
        if first is None:
            first = time.time()
        wrong += square != i * i
        soft_limits.add(soft)
    done = time.time()
    errors = [f"{wrong} of {CALLS} results wrong"] if wrong else []
    print("BENCH " + json.dumps({
        "ready": ready - T0, "first_result": first - T0, "total": done - T0,
        "calls": CALLS, "errors": errors,
        "client_soft_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "worker_soft_limits": sorted(soft_limits),
    }), flush=True)
