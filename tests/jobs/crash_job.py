"""A job in which calls kill their worker's process (test_crashes.py).

``crash_job.py MODE [all]``; MODE is how the crashing call ends its process:
``exit`` (``os._exit(3)``), ``segv`` (a NULL read) or ``abort`` (``os.abort()``).

Default: good calls around one crashing ``submit``, then a ``map`` in which
one item crashes; each crash must fail only its own call, within seconds,
with a WorkerCrashError naming the function, the status or signal and the
worker; every other result must be right, and the executor usable after
(the launch needs three workers).  ``all``: every worker runs a crashing
call, so the executor must break within seconds, saying why.
"""

import concurrent.futures as cf
import ctypes
import os
import sys
import time

import hpcfutures

MODE = sys.argv[1]
ALL = sys.argv[2:] == ["all"]
BOUND = 15.0  # seconds a crash may take to reach its future
HOW = {"exit": "exited with status 3", "segv": "killed by SIGSEGV",
       "abort": "killed by SIGABRT"}[MODE]
#: How the scheduler's summary of a death says it (in BrokenHPCExecutor's message).
SUMMARY = {"exit": "exit status 3", "segv": "killed by SIGSEGV",
           "abort": "killed by SIGABRT"}[MODE]


def crash(mode):
    if mode == "exit":
        os._exit(3)
    elif mode == "segv":
        ctypes.string_at(0)
    else:
        os.abort()


def square(x):
    return x * x


def slow_square(x):
    time.sleep(0.05)
    return x * x


def crash_at_seven(x):
    if x == 7:
        crash(MODE)
    return x * x


def check_crash(err, function, seconds):
    text = str(err)
    assert isinstance(err, hpcfutures.WorkerCrashError), repr(err)
    assert function in text and HOW in text, text
    assert "rank " in text or "local worker" in text, text
    assert seconds < BOUND, f"{seconds:.1f} s"
    if MODE != "exit":
        cause = str(err.__cause__)
        assert "Fatal Python error" in cause and function.strip().split(".")[-1] in cause, cause


def one_crash(ex):
    good = [ex.submit(slow_square, i) for i in range(30)]
    started = time.monotonic()
    bad = ex.submit(crash, MODE)
    chained = ex.submit(square, good[3])  # an argument that survives: runs
    dependent = ex.submit(square, bad)  # an argument that crashed: fails with its error
    try:
        bad.result(timeout=60)
    except hpcfutures.WorkerCrashError as err:
        seconds = time.monotonic() - started
        check_crash(err, "__main__.crash ", seconds)
        print(f"CRASH SEEN in {seconds:.2f} s: {err}", flush=True)
    else:
        raise AssertionError("the crashing call returned")
    _, pending = cf.wait([*good, chained, dependent], timeout=45)
    for future in pending:  # what it waits for, should it ever hang
        call = future._call
        print(f"STILL PENDING {future} recipe={call.recipe and call.recipe[0].__name__}"
              f" losses={call.losses} dask={call.dask} bundle={call.bundle}"
              f" bundle_dask={call.bundle and call.bundle[0]._call.dask}",
              flush=True)
    assert [f.result(timeout=15) for f in good] == [i * i for i in range(30)]
    assert chained.result(timeout=15) == 81
    try:
        dependent.result(timeout=60)
    except hpcfutures.WorkerCrashError as err:
        assert "__main__.crash " in str(err), err
    else:
        raise AssertionError("a call whose argument crashed its worker ran")
    print("OTHERS OK", flush=True)


def map_crash(ex):
    results = []
    started = time.monotonic()
    try:
        for value in ex.map(crash_at_seven, range(40), timeout=60):
            results.append(value)
    except hpcfutures.WorkerCrashError as err:
        seconds = time.monotonic() - started
        check_crash(err, "__main__.crash_at_seven ", seconds)
        print(f"MAP CRASH SEEN in {seconds:.2f} s: {err}", flush=True)
    else:
        raise AssertionError("the map with a crashing item ended without an error")
    assert results == [x * x for x in range(7)], results
    print("MAP BEFORE OK", flush=True)


def all_crash(ex):
    started = time.monotonic()
    crashes = [ex.submit(crash, MODE) for _ in range(8)]
    for future in crashes:
        try:
            future.result(timeout=60)
        except (hpcfutures.WorkerCrashError, hpcfutures.BrokenHPCExecutor):
            pass
    try:
        ex.submit(square, 3).result(timeout=60)
    except hpcfutures.BrokenHPCExecutor as err:
        seconds = time.monotonic() - started
        assert "no worker is left" in str(err) and SUMMARY in str(err), err
        assert seconds < BOUND, f"{seconds:.1f} s"
        print(f"BROKEN SEEN in {seconds:.2f} s: {err}", flush=True)
    else:
        raise AssertionError("the executor still ran calls with every worker gone")


with hpcfutures.Executor() as ex:
    assert ex.submit(square, 2).result() == 4
    if ALL:
        all_crash(ex)
    else:
        one_crash(ex)
        map_crash(ex)
        assert list(ex.map(square, range(50))) == [x * x for x in range(50)]
        assert ex.submit(square, 5).result() == 25
        print("STILL USABLE", flush=True)
