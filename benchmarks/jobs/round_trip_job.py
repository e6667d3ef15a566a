"""One launch's lone-call round trips, for ``benchmarks/floors.py``.

Run under a launcher (``hpcfutures run -n 4 python jobs/round_trip_job.py N``): the
client times ``N`` loops of ``submit(inc, i).result()`` after 50 warm-up calls, each
call through the scheduler (the one route), and prints
``ROUND-TRIP scheduler <median ms> <best ms>``.  Needs the repository root on
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
        times = round_trips(ex.submit, calls, warm=50)
        print(f"ROUND-TRIP scheduler {statistics.median(times) * 1e3:.2f} "
              f"{min(times) * 1e3:.2f}", flush=True)
