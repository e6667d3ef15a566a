"""The contract suite as a job: start it with any launcher.

    hpcfutures run -n 3 python tests/jobs/contract_job.py
    srun -n4 python tests/jobs/contract_job.py
    mpiexec -n 4 python tests/jobs/contract_job.py

Only the client runs the checks; it prints PASS/FAIL lines and
"CONTRACT RESULT passed=<n> failed=<m>", then checks how the launch's executor
ends: ``shutdown(wait=False)`` returns at once and lets submitted work finish,
``submit`` after ``shutdown`` raises, and a second executor is refused.
Exit status: 0 when everything passed.
Options come from the environment (HPCFUTURES_*), so one script serves all.
CONTRACT_CHECKS=name,name... runs only those checks (quick end-to-end runs).
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from contract import CHECKS, EXECUTOR_OPTIONS, run_all, sleep_then, square

import hpcfutures

if os.environ.get("CONTRACT_LOG_INFO"):  # tests that watch hpcfutures' own decisions
    import logging

    logging.getLogger("hpcfutures").setLevel(logging.INFO)

only = [name for name in os.environ.get("CONTRACT_CHECKS", "").split(",") if name]
unknown = sorted(set(only) - {fn.__name__ for fn in CHECKS})
if unknown:
    sys.exit(f"CONTRACT_CHECKS names unknown checks: {', '.join(unknown)}")
executor = hpcfutures.Executor(**EXECUTOR_OPTIONS)
ex = executor.__enter__()  # None except on the client (the other ranks never get here)
failed = run_all(ex, names=only or None, out=lambda line: print(line, flush=True))
ending = 0


def verdict(ok, name):
    global ending
    ending += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}", flush=True)
    return 0 if ok else 1


# The ending of the one executor a launch serves (issue 15): shutdown(wait=False)
# returns at once, yet every call submitted before it finishes.
pending = [executor.submit(sleep_then, 0.3, i) for i in range(4)]
mapped = executor.map(square, range(30))
started = time.monotonic()
executor.shutdown(wait=False)
failed += verdict(time.monotonic() - started < 1.0, "shutdown_without_wait_returns_at_once")
try:
    executor.submit(square, 1)
except RuntimeError:
    failed += verdict(True, "submit_after_shutdown_raises")
else:
    failed += verdict(False, "submit_after_shutdown_raises")
try:
    done = ([f.result(timeout=60) for f in pending] == list(range(4))
            and list(mapped) == [x * x for x in range(30)])
except Exception as err:
    print(f"pending work failed after shutdown(wait=False): {err!r}", flush=True)
    done = False
failed += verdict(done, "shutdown_without_wait_lets_submitted_work_finish")
# One executor per launch: a second one is refused at once, with a public error
# (the laptop default, a launch of its own each time, has no such limit).
if executor.role != "standalone":
    started = time.monotonic()
    try:
        hpcfutures.Executor()
    except hpcfutures.LaunchEndedError:
        failed += verdict(time.monotonic() - started < 2.0, "second_executor_refused_at_once")
    else:
        failed += verdict(False, "second_executor_refused_at_once")
executor.shutdown(wait=True)
print(f"CONTRACT RESULT passed={len(only or CHECKS) + ending - failed} failed={failed}",
      flush=True)
sys.exit(1 if failed else 0)
