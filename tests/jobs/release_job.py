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

import hpcfutures


def worker_name(x):
    from distributed import get_worker

    time.sleep(0.05)
    return get_worker().name, x * x


def wait_for_file(path, limit):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {limit} s")
        time.sleep(0.05)
    return "narrow done"


workers, go = int(sys.argv[1]), sys.argv[2]
with hpcfutures.Executor() as ex:
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < workers and time.monotonic() < deadline:
        results = list(ex.map(worker_name, range(64)))
        assert [value for _, value in results] == [x * x for x in range(64)]
        seen |= {name for name, _ in results}
    print(f"WIDE STAGE OK on {len(seen)} workers: {sorted(seen)}", flush=True)
    narrow = ex.submit(wait_for_file, go, 120)
    print("NARROW STAGE STARTED", flush=True)
    print("NARROW STAGE OK" if narrow.result() == "narrow done" else "NARROW STAGE WRONG",
          flush=True)
    assert list(ex.map(abs, [-1, -2, -3])) == [1, 2, 3]
    print("AFTER RELEASE OK", flush=True)
