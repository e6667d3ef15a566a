"""A job whose client is in the middle of a long map until a signal ends it."""

import time

import hpcfutures


def nap(seconds):
    time.sleep(seconds)  # the behaviour: tasks still running when the signal comes
    return seconds


with hpcfutures.Executor() as ex:
    results = ex.map(nap, [0.5] * 2000)
    next(results)
    print("READY", flush=True)
    for _ in results:
        pass
