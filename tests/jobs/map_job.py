"""A job whose client maps slow tasks and checks every result (worker-loss tests)."""

import time

import hpcfutures


def slow_square(x):
    time.sleep(0.25)  # slow enough that the map is still running when a worker dies
    return x * x


with hpcfutures.Executor() as ex:
    ex.submit(abs, 1).result()
    results = ex.map(slow_square, range(40))
    print("READY", flush=True)
    values = list(results)
    assert values == [x * x for x in range(40)], values
    print("RESULTS OK", flush=True)
