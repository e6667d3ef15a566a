"""A call that needs a GPU, waiting while the only GPU worker dies: it fails at once with
NoSuitableWorkerError (no worker left can run it, none can come) instead of waiting forever;
plain calls still run.  Run on the laptop with HPCFUTURES_GPUS=0 (2 local workers).

    python stranded_job.py MARKER
"""

import os
import sys
import time

import hpcfutures
from hpcfutures import task


def dies(marker):
    open(marker, "w").close()  # says that it holds the GPU
    time.sleep(2)
    os._exit(3)


def waits(x):
    time.sleep(0.2)
    return x


def main():
    marker = sys.argv[1]
    with hpcfutures.Executor(max_workers=2) as ex:
        a = ex.submit(task(dies, gpus=1), marker)
        deadline = time.monotonic() + 30
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting for the file: the event that a holds the GPU
        b = ex.submit(task(waits, gpus=1), 2)  # waits for the GPU a holds
        started = time.monotonic()
        print("a:", type(a.exception(timeout=60)).__name__)
        error = b.exception(timeout=60)
        print("b:", type(error).__name__, error, round(time.monotonic() - started, 1))
        print("plain:", ex.submit(waits, 5).result(timeout=30))


if __name__ == "__main__":
    main()
