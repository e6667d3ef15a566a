"""A reduction-shaped job for the idle-release tests: a wide stage, then a narrow one.

    python tests/jobs/release_job.py WORKERS GO_FILE

The wide stage runs until all WORKERS workers have taken part; the narrow
stage is one task that waits for GO_FILE (created by the test once it has
seen the idle workers' ranks end).  Options come from HPCFUTURES_* (the test
sets HPCFUTURES_RELEASE_IDLE_AFTER and HPCFUTURES_MIN_WORKERS).
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import wait_until

import hpcfutures


def worker_name(x):
    from distributed import get_worker

    time.sleep(0.05)  # a task that takes a moment, so that every worker gets some
    return get_worker().name, x * x


def wait_for_file(path, limit):
    """The narrow stage: one task that ends when the test creates ``path``."""
    wait_until(lambda: os.path.exists(path), limit, f"the test to create {path}")
    return "narrow done"


def wide_stage(ex, seen):
    results = list(ex.map(worker_name, range(64)))
    assert [value for _, value in results] == [x * x for x in range(64)]
    seen |= {name for name, _ in results}
    return seen


workers, go = int(sys.argv[1]), sys.argv[2]
with hpcfutures.Executor() as ex:
    seen = set()
    wait_until(lambda: wide_stage(ex, seen), 60, f"all {workers} workers taking part",
               done=lambda names: len(names) >= workers)
    print(f"WIDE STAGE OK on {len(seen)} workers: {sorted(seen)}", flush=True)
    narrow = ex.submit(wait_for_file, go, 120)
    print("NARROW STAGE STARTED", flush=True)
    print("NARROW STAGE OK" if narrow.result() == "narrow done" else "NARROW STAGE WRONG",
          flush=True)
    assert list(ex.map(abs, [-1, -2, -3])) == [1, 2, 3]
    print("AFTER RELEASE OK", flush=True)
