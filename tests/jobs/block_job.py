"""A job whose client prints READY and then waits on a long task (signal tests)."""

import sys
import time

import hpcfutures


def nap(seconds):
    time.sleep(seconds)  # the long task the fault and signal tests interrupt
    return seconds


with hpcfutures.Executor() as ex:
    print("READY", flush=True)
    try:
        ex.submit(nap, 300).result()
    except BaseException as err:
        print(f"CLIENT SAW {type(err).__name__}", flush=True)
        raise
sys.exit(0)
