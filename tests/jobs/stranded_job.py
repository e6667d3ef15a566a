"""A call that needs a GPU, waiting while the only GPU worker dies: it fails at once with
NoSuitableWorkerError (no worker left can run it, none can come) instead of waiting forever;
plain calls still run.  Run on the laptop with HPCFUTURES_GPUS=0 (2 local workers)."""

import os, time, hpcfutures
from hpcfutures import task, NoSuitableWorkerError

def dies(x):
    time.sleep(0.5)
    os._exit(3)

def waits(x):
    time.sleep(0.2)
    return x

if __name__ == "__main__":
    with hpcfutures.Executor(max_workers=2) as ex:
        a = ex.submit(task(dies, gpus=1), 1)
        time.sleep(0.1)
        b = ex.submit(task(waits, gpus=1), 2)
        t0 = time.monotonic()
        print("a:", type(a.exception(timeout=60)).__name__)
        e = b.exception(timeout=60)
        print("b:", type(e).__name__, e, round(time.monotonic() - t0, 1))
        print("plain:", ex.submit(waits, 5).result(timeout=30))
