"""A map long enough to lose or freeze a worker in the middle; every result is checked.

``checked_map_job.py N SECONDS``: N calls of SECONDS each.  STARTED is printed
once the first result is back; RESULTS OK once all N are, each correct, with
the hosts that computed them.
"""

import socket
import sys
import time

import hpcfutures


def square_where(x, seconds):
    time.sleep(seconds)
    return x * x, socket.gethostname()


count, seconds = int(sys.argv[1]), float(sys.argv[2])
with hpcfutures.Executor() as ex:
    results = ex.map(square_where, range(count), [seconds] * count)
    values = [next(results)]
    print("STARTED", flush=True)
    values.extend(results)
    assert [value for value, _ in values] == [x * x for x in range(count)], values
    hosts = sorted({host for _, host in values})
    print(f"RESULTS OK {count} from {', '.join(hosts)}", flush=True)
