"""A job whose task crosses its worker's memory limit (set by HPCFUTURES_MEMORY_LIMIT).

Prints one line per check; the test reads them.  The hog asks for far more
than the limit, so it fails at the allocation, wherever the worker runs.
"""

import concurrent.futures as cf
import time

import hpcfutures

HOG_MIB = 2048


def hog(mib):
    block = bytearray(mib * 2**20)
    return len(block) // 2**20


with hpcfutures.Executor() as ex:
    small = ex.submit(hog, 8)
    started = time.monotonic()
    try:
        ex.submit(hog, HOG_MIB).result(timeout=60)
        print("NO ERROR")
    except hpcfutures.TaskMemoryError as err:
        print(f"TASK MEMORY ERROR after {time.monotonic() - started:.2f} s: {err}")
    print("SMALL", small.result(timeout=60))
    # The executor recovers: the same workers run more work, hogs and all.
    values = list(ex.map(hog, [1, 2, 3] * 4, timeout=60))
    print("RECOVERED", values == [1, 2, 3] * 4)
    futures = [ex.submit(hog, n) for n in (4, HOG_MIB, 5)]
    cf.wait(futures, timeout=60)
    print("NEIGHBOURS", futures[0].result(), type(futures[1].exception()).__name__,
          futures[2].result())
