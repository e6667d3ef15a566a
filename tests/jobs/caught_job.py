"""A client that catches what its executor block raised, then goes on and ends well.

``argv[1]``: ``exception`` (the block raises ValueError), ``crash`` (a call kills
its worker; the WorkerCrashError is caught) or ``uncaught`` (the ValueError ends
the program).
"""

import os
import sys

import hpcfutures


def die(status):
    os._exit(status)  # the call that kills its worker, for the "crash" case


mode = sys.argv[1] if len(sys.argv) > 1 else "exception"
try:
    with hpcfutures.Executor() as ex:
        print("ABS", ex.submit(abs, -1).result(), flush=True)
        if mode == "crash":
            ex.submit(die, 3).result()
        raise ValueError("handled below")
except (ValueError, hpcfutures.WorkerCrashError) as err:
    if mode == "uncaught":
        raise
    print("CAUGHT", type(err).__name__, flush=True)
print("AFTER THE BLOCK", flush=True)
