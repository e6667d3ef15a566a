"""One launch's lone-call round trips, for ``benchmarks/floors.py``.

Run under a launcher (``hpcfutures run -n 4 python jobs/round_trip_job.py N``): the
client times ``N`` loops of ``submit(inc, i).result()`` after 50 warm-up calls, first
as hpcfutures sends a lone call (straight to a worker, its direct lane), then with the
lane turned off, so that every call goes through the scheduler, and prints one line
per way: ``ROUND-TRIP <way> <median ms> <best ms>``.  Needs the repository root on
``PYTHONPATH`` (for ``benchmarks.floors``, whose ``inc`` the workers import), as
``floors.py`` sets it.
"""

import statistics
import sys

import hpcfutures
from benchmarks.floors import round_trips

if __name__ == "__main__":
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    with hpcfutures.Executor() as ex:
        lane = round_trips(ex.submit, calls, warm=50)
        # Private, and only here: the benchmark's way to send every call through the
        # scheduler, which a launch with the end-of-run summary on does too.
        ex._bridge.direct.enabled = False  # type: ignore[union-attr]
        scheduler = round_trips(ex.submit, calls, warm=50)
        for way, times in (("lane", lane), ("scheduler", scheduler)):
            print(f"ROUND-TRIP {way} {statistics.median(times) * 1e3:.2f} "
                  f"{min(times) * 1e3:.2f}", flush=True)
