"""One rank of an interleaving launch (``benchmarks/interleave.py``).

Every rank first sleeps for its own delay (``INTERLEAVE_DELAYS``: seconds, one per
rank, comma-separated), so the launch's ranks start in the order the harness drew.
``argv[1]`` says how the client ends:

* ``at-once``: it leaves its block without a call;
* ``call``: after one call; ``map``: after a map of 200 calls;
* ``raise-caught``: a call, then an exception it catches outside the block (status 0);
* ``raise-uncaught``: the same exception ends the program (status 1).

The client prints ``CLIENT-END <epoch seconds> <status>`` as it leaves its block.
"""

import os
import sys
import time

RANK_VARIABLES = ("HPCFUTURES_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "PMI_RANK")


def my_rank() -> int:
    for name in RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    raise SystemExit(f"no rank variable among {RANK_VARIABLES}")


delays = [float(d) for d in os.environ["INTERLEAVE_DELAYS"].split(",")]
time.sleep(delays[my_rank()])

import hpcfutures  # noqa: E402  (the delay comes first: this rank starts late)


def inc(x):
    return x + 1


def client_end(status: int) -> None:
    print(f"CLIENT-END {time.time():.3f} {status}", flush=True)


ending = sys.argv[1]
try:
    with hpcfutures.Executor() as ex:
        if ending != "at-once":
            assert ex.submit(inc, 1).result() == 2
        if ending == "map":
            assert list(ex.map(inc, range(200))) == list(range(1, 201))
        if ending.startswith("raise"):
            raise ValueError("the client ends by an exception")
except ValueError:
    if ending == "raise-uncaught":
        client_end(1)
        raise
    client_end(0)
else:
    client_end(0)
