"""Endings of a launch's executor other than a ``with`` block (issue 15), under any launcher.

    hpcfutures run -n 3 python tests/jobs/ending_job.py MODE
    srun -n3 python3 tests/jobs/ending_job.py MODE
    mpiexec -n 3 python tests/jobs/ending_job.py MODE

MODE ``exit``: the program never calls shutdown(), and an ``atexit`` handler
submits (refused: it prints "ATEXIT REFUSED <message>"); ``lost``: the executor
is dropped (``del``) with a call pending.  Either way the pending call must
run and print "PENDING CALL RAN <value>".  ``cancel``: shutdown(cancel_futures=True)
after many submits cancels only the calls not started; it prints "CANCEL OK".
``initfail`` (4 ranks, rank 3 joining late through tests/jobs/slow_join.py):
the initializer raises in the worker that joins later, so the calls pending
then and every later submit fail with BrokenHPCExecutor caused by it; it
prints "INITFAIL OK".  Every mode prints "CLIENT DONE <mode>"; the launch
must end with status 0.
"""

import atexit
import concurrent.futures as cf
import os
import sys
import tempfile
import time

import hpcfutures


def slow_square(x):
    time.sleep(1)
    return x * x


def sleep_then(seconds, value=None):
    time.sleep(seconds)
    return value


def report(future):
    print(f"PENDING CALL RAN {future.result()}", flush=True)


class SecondWorkerError(Exception):
    pass


def fail_after_the_first(path):
    """Succeeds in the first worker only: the one that joins later fails."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise SecondWorkerError("the initializer fails on purpose in a later worker") from None


def check_cancel(executor):
    futures = [executor.submit(sleep_then, 0.2, i) for i in range(40)]
    deadline = time.monotonic() + 60
    while not any(f.running() for f in futures):  # no event says "sent": poll
        assert time.monotonic() < deadline, "no call started within 60 s"
        time.sleep(0.01)
    running = [f for f in futures if f.running()]
    executor.shutdown(wait=True, cancel_futures=True)
    assert all(f.done() for f in futures)
    cancelled = sum(f.cancelled() for f in futures)
    assert cancelled, "nothing was cancelled"
    for future in running:  # sent to a worker before shutdown: finished, not cancelled
        assert future.result(timeout=1) == futures.index(future)
    for i, future in enumerate(futures):
        assert future.cancelled() or future.result(timeout=1) == i
    print(f"CANCEL OK cancelled={cancelled} finished={len(futures) - cancelled}", flush=True)


def check_initializer_failure(executor):
    started = time.monotonic()
    pending = [executor.submit(sleep_then, 0.2, i) for i in range(60)]
    errors = [f.exception(timeout=60) for f in pending]
    late = time.monotonic() - started
    assert any(isinstance(e, hpcfutures.BrokenHPCExecutor) for e in errors), errors
    for error in errors:
        assert error is None or isinstance(error, hpcfutures.BrokenHPCExecutor), error
    broken = next(e for e in errors if e is not None)
    assert isinstance(broken, cf.BrokenExecutor)
    assert type(broken.__cause__) is SecondWorkerError, repr(broken.__cause__)
    assert isinstance(broken.__cause__.__cause__, hpcfutures.RemoteTraceback)
    try:
        executor.submit(sleep_then, 0, 1)
    except hpcfutures.BrokenHPCExecutor as err:
        assert type(err.__cause__) is SecondWorkerError, repr(err.__cause__)
    else:
        raise AssertionError("a broken executor accepted a call")
    print(f"INITFAIL OK after {late:.1f} s", flush=True)


mode = sys.argv[1]
options = {}
if mode == "initfail":
    marker = os.path.join(tempfile.gettempdir(),
                          f"hpcf-initfail-{os.environ['HPCFUTURES_TEST_MARKER']}")
    options = {"initializer": fail_after_the_first, "initargs": (marker,)}
executor = hpcfutures.Executor(**options)
if mode in ("exit", "lost"):
    future = executor.submit(slow_square, 7)
    future.add_done_callback(report)
if mode == "exit":
    def late():
        try:
            executor.submit(abs, -1)
        except RuntimeError as err:
            print(f"ATEXIT REFUSED {err}", flush=True)
    atexit.register(late)
elif mode == "lost":
    del executor
    future.result(timeout=60)
elif mode == "cancel":
    check_cancel(executor)
elif mode == "initfail":
    try:
        check_initializer_failure(executor)
    finally:
        os.unlink(marker)
print(f"CLIENT DONE {mode}", flush=True)
