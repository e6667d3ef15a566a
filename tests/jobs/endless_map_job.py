"""A client whose ``map`` reads its items until a signal ends it.

``endless_map_job.py endless``: the items come from ``itertools.count()``, read
in C throughout; ``slow``: from a Python generator, an item a millisecond.
STARTED is printed once the map has begun to read them.
"""

import itertools
import resource
import sys
import time

import hpcfutures


def square(x):
    return x * x


def announce():
    print("STARTED", flush=True)
    yield from ()


def slowly():
    for i in itertools.count():
        time.sleep(0.001)
        yield i


source = itertools.count() if sys.argv[1] == "endless" else slowly()
with hpcfutures.Executor() as ex:
    # Were the signal lost, the map would fill this machine's memory: stop at 4 GiB more.
    in_use = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                  if line.startswith("VmData:"))
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    resource.setrlimit(resource.RLIMIT_DATA, (in_use + 4 * 2**30, hard))
    for _ in ex.map(square, itertools.chain(announce(), source)):
        pass
