"""A client outside a serving launch: connect, run checks, leave; maybe stop the launch.

    python tests/jobs/connect_job.py FILE ACTION...

ACTIONs run in order, each with a connection of its own:

``contract``  connect, run the contract suite, disconnect; then check that
              ``submit`` after leaving raises
``quick``     connect, one ``map``, disconnect
``stop``      connect, one task, then ``stop_allocation()``
``stopfile``  ``hpcfutures.stop(FILE)`` without connecting

Prints PASS/FAIL lines and "CONNECT RESULT failed=<n>"; exit status 0 when all
passed.  CONNECT_WAIT: seconds the first ``connect`` waits for the file (a
batch job still starting); default 0.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from contract import run_all, square

import hpcfutures


def say(line):
    print(line, flush=True)


def contract(path, wait):
    executor = hpcfutures.connect(path, wait=wait)
    with executor as ex:
        failed = run_all(ex, out=say)
    try:
        executor.submit(square, 1)
    except RuntimeError:
        say("PASS submit_after_leaving_raises")
    else:
        failed += 1
        say("FAIL submit_after_leaving_raises")
    return failed


def quick(path, wait):
    with hpcfutures.connect(path, wait=wait) as ex:
        ok = list(ex.map(square, range(20))) == [x * x for x in range(20)]
    say(f"{'PASS' if ok else 'FAIL'} reconnected_and_mapped")
    return 0 if ok else 1


def stop(path, wait):
    ex = hpcfutures.connect(path, wait=wait)
    ok = ex.submit(square, 9).result(timeout=60) == 81
    started = time.monotonic()
    ex.stop_allocation()
    say(f"{'PASS' if ok else 'FAIL'} stopped_from_the_client "
        f"({time.monotonic() - started:.2f} s to stop)")
    return 0 if ok else 1


def stop_file(path, wait):
    hpcfutures.stop(path)
    say("PASS stopped_through_the_file")
    return 0


ACTIONS = {"contract": contract, "quick": quick, "stop": stop, "stopfile": stop_file}

path, actions = sys.argv[1], sys.argv[2:]
wait = float(os.environ.get("CONNECT_WAIT", "0"))
failed = 0
for action in actions:
    failed += ACTIONS[action](path, wait)
    wait = 0.0  # the launch is up: later connections must succeed at once
print(f"CONNECT RESULT failed={failed}", flush=True)
sys.exit(1 if failed else 0)
