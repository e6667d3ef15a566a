"""A job for the monitoring tests: ``python tests/jobs/monitor_job.py MODE``.

Modes (only the client runs them; options come from HPCFUTURES_* variables):

* ``watch``   map 60 short calls, print ``MAPPED``, then wait (at most 60 s)
              until the file named by MONITOR_RELEASE exists, so the test can
              visit the dashboard while the launch runs
* ``losing``  map calls one of which ends worker rank 2's process (status 3);
              the map still completes on the other worker; print ``RESULTS OK``
              and wait a few seconds, so the client notices the lost rank
"""

import os
import sys
import time

import hpcfutures


def nap(x):
    time.sleep(0.02)
    return x


def die_on_rank_2(x):
    if os.environ.get("HPCFUTURES_RANK") == "2":
        time.sleep(1)  # a worker that dies while working, not the instant it joins
        os._exit(3)
    time.sleep(0.05)
    return x


def main(mode):
    with hpcfutures.Executor() as ex:
        if mode == "watch":
            assert list(ex.map(nap, range(60))) == list(range(60))
            print("MAPPED", flush=True)
            release = os.environ["MONITOR_RELEASE"]
            deadline = time.monotonic() + 60
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.1)
        elif mode == "losing":
            assert list(ex.map(die_on_rank_2, range(40))) == list(range(40))
            print("RESULTS OK", flush=True)
            time.sleep(4)  # the client checks on its workers every half second


if __name__ == "__main__":
    main(sys.argv[1])
