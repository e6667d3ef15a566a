"""A client outside a serving launch: connect, run checks, leave; maybe stop the launch.

    python tests/jobs/connect_job.py FILE ACTION...

ACTIONs run in order, each with a connection of its own:

``contract``  connect, run the contract suite, disconnect; then check that
              ``submit`` after leaving raises
``quick``     connect, one ``map``, disconnect
``stop``      connect, one task, then ``stop_allocation()``
``stopfile``  ``hpcfutures.stop(FILE)`` without connecting
``crash``     connect, one call that kills its worker: it alone fails, naming
              itself, and only its worker leaves the launch

Prints PASS/FAIL lines and "CONNECT RESULT failed=<n>"; exit status 0 when all
passed.  CONNECT_WAIT: seconds the first ``connect`` waits for the file (a
batch job still starting); default 0.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from contract import run_all, square
from waiting import workers_joined

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


def die_on_rank_1(x):
    """Ends its worker if that is rank 1 of ``hpcfutures run`` (the client's rank in a
    launch with a client of its own): the rank that hpcfutures run must not take for
    the launch's lead in a serving launch."""
    if os.environ.get("HPCFUTURES_RANK") == "1":
        os._exit(3)
    time.sleep(0.01)
    return x


def crash(path, wait):
    with hpcfutures.connect(path, wait=wait) as ex:
        # Every worker of the launch first (CONNECT_WORKERS of them): the one that dies
        # must be there to take a call, and the count after is one fewer than all.
        before = len(workers_joined(ex, int(os.environ.get("CONNECT_WORKERS", "1"))))
        try:
            list(ex.map(die_on_rank_1, range(60), chunksize=1))
        except hpcfutures.WorkerCrashError as err:
            named = "die_on_rank_1" in str(err) and "status 3" in str(err)
            say(f"CRASH {err}")
        else:
            named = False
        ok = ex.submit(square, 4).result(timeout=60) == 16
        left = before
        deadline = time.monotonic() + 30
        while left != before - 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            left = len(ex.worker_memory_limits())
    passed = named and ok and left == before - 1
    say(f"{'PASS' if passed else 'FAIL'} a_call_that_kills_its_worker_fails_alone "
        f"(named {named}, next call {ok}, workers {before} -> {left})")
    return 0 if passed else 1


def stop_file(path, wait):
    hpcfutures.stop(path)
    say("PASS stopped_through_the_file")
    return 0


ACTIONS = {"contract": contract, "quick": quick, "stop": stop, "stopfile": stop_file,
           "crash": crash}

path, actions = sys.argv[1], sys.argv[2:]
wait = float(os.environ.get("CONNECT_WAIT", "0"))
failed = 0
for action in actions:
    failed += ACTIONS[action](path, wait)
    wait = 0.0  # the launch is up: later connections must succeed at once
print(f"CONNECT RESULT failed={failed}", flush=True)
sys.exit(1 if failed else 0)
