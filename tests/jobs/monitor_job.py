"""A job for the monitoring tests: ``python tests/jobs/monitor_job.py MODE``.

Modes (only the client runs them; options come from HPCFUTURES_* variables):

* ``watch``   map 60 short calls, print ``MAPPED``, then wait (at most 60 s)
              until the file named by MONITOR_RELEASE exists, so the test can
              visit the dashboard while the launch runs
* ``losing``  calls one of which ends worker rank 2's process (status 3): that
              call fails with WorkerCrashError, the others complete on the other
              worker; print ``RESULTS OK``
              and wait (at most 10 s) until the client has noticed the lost rank

Both run under ``hpcfutures run -n 4``, and wait for its two workers first: the
summary names each, and rank 2 must be there to take a call.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import wait_until, workers_joined

import hpcfutures


def nap(x):
    time.sleep(0.02)  # short calls that still take time, for the progress and summary
    return x


def die_on_rank_2(x):
    if os.environ.get("HPCFUTURES_RANK") == "2":
        time.sleep(1)  # a worker that dies while working, not the instant it joins
        os._exit(3)
    time.sleep(0.05)  # so that rank 2 gets calls before the map is done
    return x


def main(mode):
    with hpcfutures.Executor() as ex:
        workers_joined(ex, 2)
        if mode == "watch":
            assert list(ex.map(nap, range(60))) == list(range(60))
            print("MAPPED", flush=True)
            release = os.environ["MONITOR_RELEASE"]
            wait_until(lambda: os.path.exists(release), 60, f"the test to create {release}")
        elif mode == "losing":
            futures = [ex.submit(die_on_rank_2, i) for i in range(40)]
            crashed = [f for f in futures
                       if isinstance(f.exception(60), hpcfutures.WorkerCrashError)]
            # The call that ended rank 2 fails alone; every other call ran elsewhere.
            assert len(crashed) == 1, [f.exception() for f in futures]
            assert all(f.result() == i for i, f in enumerate(futures) if f not in crashed)
            print("RESULTS OK", flush=True)
            # The client checks on its workers every half second, then names the lost one.
            wait_until(lambda: "rank-2" in ex._bridge.roster.lost, 10,
                       "the client noticing that worker rank 2 left")


if __name__ == "__main__":
    main(sys.argv[1])
