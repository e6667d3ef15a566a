"""Small jobs for the Slurm tests: ``python tests/jobs/slurm_job.py MODE [ARG]``.

Modes (only the client runs them; the other ranks serve and exit):

* ``sum N``        print ``SUM <sum of squares below N>``
* ``workers T``    check that every worker has T threads and a rank name;
                   print ``WORKERS OK <count>``
* ``memory B``     check that every worker's memory limit is B bytes
* ``slow``         print ``MAP STARTED`` and map slow tasks (to be scancelled)
* ``raise``        raise an exception in the client after one result
"""

import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import wait_until

import hpcfutures

# The tests read hpcfutures' INFO lines (a stale file ignored, a late element
# sent home) from the job's output.
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
logging.getLogger("hpcfutures").setLevel(logging.INFO)


def square(x):
    return x * x


def worker_facts(_):
    from distributed import get_worker

    worker = get_worker()
    return worker.name, worker.state.nthreads, worker.memory_manager.memory_limit


def nap(seconds):
    time.sleep(seconds)  # slow tasks: the job is cancelled while they run
    return seconds


def facts_of_every_worker(ex):
    """One fact tuple per worker: keep asking until every worker has answered."""
    expected, seen = int(os.environ.get("EXPECT_WORKERS", "1")), {}

    def ask():
        for name, threads, memory in ex.map(worker_facts, range(32)):
            seen[name] = (threads, memory)
        return seen

    return wait_until(ask, 30, f"facts from {expected} workers",
                      done=lambda facts: len(facts) >= expected)


def main(mode, arg):
    with hpcfutures.Executor() as ex:
        plan = ex._session._plan
        exchange = plan.exchange.description if plan.exchange else "none"
        print(f"CLIENT launcher={plan.launcher.name} role={ex.role} "
              f"launch={plan.identity.launch_id} exchange={exchange}", flush=True)
        if mode == "sum":
            print(f"SUM {sum(ex.map(square, range(int(arg))))}", flush=True)
        elif mode in ("workers", "memory"):
            seen = facts_of_every_worker(ex)
            print(f"FACTS {sorted(seen.items())}", flush=True)
            index = 0 if mode == "workers" else 1
            wrong = {n: f for n, f in seen.items() if str(f[index]) != arg}
            assert not wrong, f"workers whose {mode} is not {arg}: {wrong}"
            print(f"{mode.upper()} OK {len(seen)}", flush=True)
        elif mode == "slow":
            results = ex.map(nap, [30] * 8)
            print("MAP STARTED", flush=True)
            print(f"UNEXPECTED {list(results)}", flush=True)
        elif mode == "raise":
            assert ex.submit(square, 3).result(timeout=30) == 9
            print("RAISING", flush=True)
            raise RuntimeError("the client fails on purpose")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
