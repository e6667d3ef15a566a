"""The scheduler's and the client's ranks of ``benchmarks/scale.py``, as a user's script.

Started twice by the harness, as ranks 0 and 1 of an ``hpcfutures run``-style
launch (``HPCFUTURES_RANK``/``SIZE``/``LAUNCH_ID``, the scheduler file in
``HPCFUTURES_SCHEDULER_FILE``); the worker ranks are hosted elsewhere
(``scale_hosts.py``).  Rank 0 serves; rank 1 waits until every worker has
joined, runs a map (the cost of a map on this launch, nothing lost), runs it
again, and prints when each phase happened (``time.time()``) for the harness,
which kills 10 % of the workers while the second map's first calls run.

    SCALE_CALLS=6000 SCALE_SECONDS=1.0 python benchmarks/jobs/scale_job.py
"""

import os
import sys
import time

import hpcfutures
from benchmarks.jobs.scale_hosts import timed_maps

CALLS = int(os.environ.get("SCALE_CALLS", "300"))
SECONDS = float(os.environ.get("SCALE_SECONDS", "1.0"))
IDLE = float(os.environ.get("SCALE_IDLE", "0"))
WORKERS = int(os.environ["HPCFUTURES_SIZE"]) - 2


def work(x):
    time.sleep(SECONDS)
    return x * x


#: "CALLSxSECONDS,...": maps of CALLS calls per worker of SECONDS each, timed
#: against the ideal (every worker thread busy from the first call to the last).
THROUGHPUT = timed_maps(os.environ.get("SCALE_THROUGHPUT", ""))


def nap_first(x):
    time.sleep(THROUGHPUT[0][1])
    return x


def nap_second(x):  # a function of its own: each is measured apart
    time.sleep(THROUGHPUT[1][1])
    return x


#: Two maps of calls as long ("100x0.05,120x0.05") run one function: the second
#: finds it measured by the first, as a user's loop of maps does.
SAME = len(THROUGHPUT) > 1 and THROUGHPUT[0][1] == THROUGHPUT[1][1]
NAPS = [nap_first, nap_first if SAME else nap_second]


def tasks_sent(ex):
    """Dask tasks this executor has sent so far (a benchmark's peek: the sender
    numbers its tasks' keys with an itertools.count, whose repr shows the next)."""
    counter = ex._bridge.sender._counter
    return int(repr(counter)[len("count("):-1])


def say(what, *more):
    print(what, repr(time.time()), *more, flush=True)


def count_messages():
    """SCALE_COUNT_MESSAGES=1: print, every 2 s, how many messages of each op this
    rank's Dask streams have sent (what a profile of the scheduler cannot show)."""
    import collections
    import threading

    from distributed.batched import BatchedSend

    sent = collections.Counter()
    real_send = BatchedSend.send

    def counting(self, *msgs):
        sent.update(m.get("op", "?") if isinstance(m, dict) else "?" for m in msgs)
        return real_send(self, *msgs)

    BatchedSend.send = counting

    from distributed.protocol import pickle as dask_pickle

    pickled: collections.Counter = collections.Counter()  # "<type> calls|ms|bytes" -> total
    real_dumps = dask_pickle.dumps

    def timed_dumps(x, *args, **kwargs):
        began = time.perf_counter()
        result = real_dumps(x, *args, **kwargs)
        name = type(x).__name__
        pickled[name + " calls"] += 1
        pickled[name + " ms"] += (time.perf_counter() - began) * 1e3
        pickled[name + " bytes"] += len(result)
        return result

    dask_pickle.dumps = timed_dumps

    def report():
        while True:
            time.sleep(2)
            print("MESSAGES", repr(time.time()), dict(sent.most_common()), file=sys.stderr,
                  flush=True)
            print("PICKLED", repr(time.time()), {k: round(v) for k, v in pickled.items()},
                  file=sys.stderr, flush=True)

    threading.Thread(target=report, daemon=True).start()


if os.environ.get("SCALE_COUNT_MESSAGES"):
    count_messages()


with hpcfutures.Executor() as ex:
    # Only the client gets here.  A benchmark may look inside: how many
    # workers the scheduler has right now is not part of the public API.
    bridge = ex._bridge
    if os.environ.get("SCALE_GATHER") == "scheduler":  # compare Dask's two paths
        bridge._client.direct_to_workers = False
    while bridge.workers_now(60) < WORKERS:
        time.sleep(0.05)
    say("READY")
    # Every worker joined and idle: what the launch costs doing nothing.
    time.sleep(IDLE)
    say("IDLE")
    # A first map, no worker lost: what a map of this size costs on this launch.
    began = time.time()
    assert list(ex.map(work, range(CALLS))) == [n * n for n in range(CALLS)]
    say("WARM", time.time() - began)
    for (per_worker, seconds), nap in zip(THROUGHPUT, NAPS, strict=False):  # at most two maps
        calls, sent = per_worker * WORKERS, tasks_sent(ex)
        began = time.time()
        assert list(ex.map(nap, range(calls))) == list(range(calls))
        took = time.time() - began
        # How long a call took on its worker, as the client learnt it (sleeps end
        # late on hosts that share two cores): a benchmark's peek inside.
        measured = ex._bridge.batcher.durations.get(nap)
        say("THROUGHPUT", f"{per_worker}x{seconds:g}", took, per_worker * seconds,
            (tasks_sent(ex) - sent) / took, f"measured={measured}")
    say("MAPPING")
    wrong = 0
    for n, result in enumerate(ex.map(work, range(CALLS))):
        if n == 0:
            say("FIRST")
        wrong += result != n * n
    say("DONE", wrong)
    say("LEAVING")
sys.exit(0)
