"""The executor contract: what users rely on, as plain check functions.

Every executor kind runs the same checks: the laptop default in the pytest
process (``test_contract_local.py``), and each launcher through
``contract_job.py`` started by that launcher (``hpcfutures run``, ``srun``,
``mpiexec``).  A check takes a usable executor and raises on failure.
"""

from __future__ import annotations

import concurrent.futures as cf
import gc
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import weakref

from pace import scaled
from waiting import wait_until

import hpcfutures

CHECKS = []

#: What every executor of the contract is created with (``initializer_ran_...`` checks it).
EXECUTOR_OPTIONS = {"initializer": "set below", "initargs": ("ready",)}


def check(fn):
    CHECKS.append(fn)
    return fn


# ------------------------------------------------------------------ helpers
def square(x):
    return x * x


def add(x, y=0):
    return x + y


def total(values):
    return sum(values)


def fail_on(x, bad):
    if x == bad:
        raise ValueError(f"bad item {x}")
    return x


def sleep_then(seconds, value=None):
    time.sleep(seconds)  # a task that takes time: the checks need one
    return value


def where():
    return os.getpid()


class Payload:
    """A result object whose lifetime the tests watch through a weak reference."""

    def __init__(self, n):
        self.n = n


def make_payload(n):
    return Payload(n)


class CustomError(Exception):
    pass


def raise_custom():
    raise CustomError("custom failure on purpose")


# ------------------------------------------------------------------- checks
@check
def submit_returns_a_real_future(ex):
    future = ex.submit(square, 7)
    assert isinstance(future, cf.Future)
    assert future.result(timeout=30) == 49
    assert future.done() and not future.cancelled()
    assert future.exception() is None


@check
def submit_passes_args_and_kwargs(ex):
    assert ex.submit(add, 1, y=2).result(timeout=30) == 3
    # keyword names that Dask's own submit would swallow reach the function
    def echo(**kwargs):
        return kwargs
    sent = {"key": "k", "pure": True, "workers": None, "fn": 1, "retries": 2}
    assert ex.submit(echo, **sent).result(timeout=30) == sent


@check
def map_keeps_order(ex):
    assert list(ex.map(square, range(50))) == [x * x for x in range(50)]
    assert list(ex.map(add, range(10), range(10, 20))) == [x + x + 10 for x in range(10)]
    assert list(ex.map(square, [])) == []


@check
def map_honours_chunksize(ex):
    for chunksize in (2, 7, 64):
        assert list(ex.map(square, range(100), chunksize=chunksize)) == [
            x * x for x in range(100)
        ]
    try:
        ex.map(square, range(3), chunksize=0)
    except ValueError:
        pass
    else:
        raise AssertionError("chunksize=0 was accepted")


@check
def map_with_buffersize_reads_its_input_lazily(ex):
    """Python 3.14's ``buffersize``: an endless input, never read more than
    ``buffersize`` items ahead of the results taken; its errors at their place."""
    import itertools

    read = []

    def counted():
        for n in itertools.count():
            read.append(n)
            yield n

    results = ex.map(square, counted(), buffersize=5)
    for taken, value in enumerate(itertools.islice(results, 40), start=1):
        assert value == (taken - 1) ** 2
        assert len(read) <= taken + 5, (taken, len(read))
    results.close()
    assert len(read) <= 45
    assert list(ex.map(add, range(7), range(7), buffersize=3)) == [2 * x for x in range(7)]
    assert list(ex.map(square, [], buffersize=2)) == []

    def broken():
        yield 1
        yield 2
        raise LookupError("the input broke")

    seen = []
    try:
        for value in ex.map(square, broken(), buffersize=1):
            seen.append(value)
    except LookupError:
        assert seen == [1, 4], seen
    else:
        raise AssertionError("the input's error was lost")
    # Python 3.14 checks isinstance(buffersize, int): True is a buffer of one.
    assert list(ex.map(square, range(3), buffersize=True)) == [0, 1, 4]
    for wrong, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError),
                         (False, ValueError), ("2", TypeError)):
        try:
            ex.map(square, range(3), buffersize=wrong)
        except error:
            pass
        else:
            raise AssertionError(f"buffersize={wrong!r} was accepted")


@check
def map_raises_at_the_failing_position(ex):
    for chunksize in (1, 3):
        seen = []
        try:
            for value in ex.map(fail_on, range(10), [4] * 10, chunksize=chunksize):
                seen.append(value)
        except ValueError as err:
            assert "bad item 4" in str(err)
        else:
            raise AssertionError("no exception from map")
        assert seen == [0, 1, 2, 3], (chunksize, seen)


# A map that times out leaves its slow call running, as ProcessPoolExecutor's does.
# The check that made it waits for its end (the call marks it in a file: the
# workers of every launch the contract runs under share the client's file system),
# so that the checks after it find every worker free.
def nap(seconds, marker=None):
    time.sleep(seconds)
    if marker is not None:
        with open(marker, "w"):
            pass
    return seconds


def leftover_marker() -> str:
    """A file name, in a directory of its own, for a slow call to mark its end."""
    return os.path.join(tempfile.mkdtemp(prefix="hpcf-contract-"), "ended")


def wait_for_leftover(marker: str) -> None:
    """Wait until the slow call that ``marker`` was given has ended."""
    wait_until(lambda: os.path.exists(marker), 60, f"the slow call of a timed-out map to end "
               f"({marker})")
    shutil.rmtree(os.path.dirname(marker), ignore_errors=True)


@check
def map_timeout_raises_timeout_error(ex):
    marker = leftover_marker()
    results = ex.map(nap, [2], [marker], timeout=0.3)
    started = time.monotonic()
    try:
        next(results)
    except TimeoutError:
        pass
    else:
        raise AssertionError("map did not time out")
    assert time.monotonic() - started < scaled(1.5)
    wait_for_leftover(marker)


@check
def map_timeout_yields_the_results_that_were_ready(ex):
    """As with ProcessPoolExecutor, whatever the function was measured at: the quick
    items of a map share a chunk with its slow one, and still come before the timeout."""
    list(ex.map(nap, [0] * 200))  # measured as short: the next map goes in few chunks
    marker = leftover_marker()
    got = []
    try:
        for value in ex.map(nap, [0] * 10 + [scaled(1.2)] + [0] * 10,
                            [None] * 10 + [marker] + [None] * 10, timeout=scaled(0.6)):
            got.append(value)
    except TimeoutError:
        pass
    else:
        raise AssertionError("map did not time out")
    assert got == [0] * 10, got
    wait_for_leftover(marker)


def rest(seconds):
    time.sleep(seconds)
    return seconds


def dawdle(seconds, marker):
    return nap(seconds, marker)


@check
def a_call_after_a_timed_out_map_runs_on_a_free_worker(ex):
    """The slow calls a timed-out map leaves running keep their workers busy, in the
    scheduler's eyes too: the lone calls sent after them run on the free worker at
    once (ProcessPoolExecutor: the same).  With one worker there is none."""
    workers = len(ex.worker_memory_limits())
    if workers < 2:
        return
    list(ex.map(rest, [0] * 200))  # measured as short
    # A function not measured yet goes one call a task: a slow call on every worker but one.
    markers = [leftover_marker() for _ in range(workers - 1)]
    try:
        next(ex.map(dawdle, [scaled(1.5)] * len(markers), markers, timeout=scaled(0.2)))
    except TimeoutError:
        pass
    else:
        raise AssertionError("map did not time out")
    for call in range(3):
        future = ex.submit(rest, 0)
        done, _ = cf.wait([future], timeout=scaled(0.5))
        assert done, f"call {call} after the timed-out map waited behind its slow calls"
    for marker in markers:
        wait_for_leftover(marker)


def doze(seconds):
    time.sleep(seconds)
    return seconds


def snooze(seconds):
    time.sleep(seconds)
    return seconds


def drowse(seconds):
    time.sleep(seconds)
    return seconds


def quick_calls_done(quick, slow, timeout):
    """Fail unless every call of ``quick`` is done within ``timeout`` s (from now) while
    ``slow`` runs; the message says which were not, and when each was done after all."""
    started = time.monotonic()
    ended: dict[int, float] = {}
    for index, future in enumerate([*quick, slow]):
        future.add_done_callback(lambda _f, i=index: ended.setdefault(i, time.monotonic()))
    done, _ = cf.wait(quick, timeout=timeout)
    if len(done) < len(quick):
        cf.wait([*quick, slow], timeout=scaled(30))

        def after(i: int) -> float | None:
            return round(ended[i] - started, 2) if i in ended else None

        late = {i: after(i) for i, future in enumerate(quick) if future not in done}
        raise AssertionError(
            f"{len(done)} of {len(quick)} done within {timeout:.2f} s while a slow call ran; "
            f"the others, by index, done after (s): {late}; the slow call after "
            f"{after(len(quick))} s")


@check
def submitted_calls_before_a_slow_one_finish_while_it_runs(ex):
    """Calls bundled with a slow call they were submitted before are done while it runs."""
    list(ex.map(doze, [0] * 200))  # measured as short: submits are bundled
    quick = [ex.submit(doze, 0) for _ in range(5)]
    slow = ex.submit(doze, scaled(1))
    quick_calls_done(quick, slow, scaled(0.6))
    slow.result(timeout=scaled(30))


@check
def calls_submitted_after_a_slow_one_do_not_wait_for_it(ex):
    """The calls bundled behind a slow call are given back by its worker and run on a
    free thread (ProcessPoolExecutor: no wait either).  With one worker there is none."""
    if len(ex.worker_memory_limits()) < 2:
        return
    list(ex.map(snooze, [0] * 200))  # measured as short: submits are bundled
    slow = ex.submit(snooze, scaled(1.2))
    quick = [ex.submit(snooze, 0) for _ in range(10)]
    quick_calls_done(quick, slow, scaled(0.8))
    slow.result(timeout=scaled(30))


def mull(seconds, marker=None):
    return nap(seconds, marker)  # nap under a name of its own: measured apart


@check
def map_items_behind_a_slow_one_run_on_a_free_worker(ex):
    """The items of a map cut into one chunk behind a slow item are given back by its
    worker and run on a free thread while it runs (ProcessPoolExecutor: no wait either);
    the results still come in order.  With one worker there is none."""
    if len(ex.worker_memory_limits()) < 2:
        return
    list(ex.map(mull, [0] * 200))  # measured as short: the next map goes in few chunks
    folder = tempfile.mkdtemp(prefix="hpcf-contract-")
    markers = [os.path.join(folder, str(index)) for index in range(21)]
    started = time.time()  # the markers' times are the wall clock's
    results = ex.map(mull, [scaled(2)] + [0] * 20, markers)

    def quick_ones_done() -> bool:
        return all(os.path.exists(marker) for marker in markers[1:])

    try:
        wait_until(quick_ones_done, 1.2, "the quick items behind the slow one to be done "
                   "while it ran", cap=0.05)
    except AssertionError:
        list(results)  # all done now
        late = {index: round(os.path.getmtime(marker) - started, 2)
                for index, marker in enumerate(markers)
                if index and os.path.getmtime(marker) - started > scaled(1.2)}
        raise AssertionError(f"quick items waited for the slow item, by index, done after "
                             f"(s): {late}; the slow one after "
                             f"{os.path.getmtime(markers[0]) - started:.2f} s") from None
    assert list(results) == [scaled(2)] + [0] * 20
    shutil.rmtree(folder, ignore_errors=True)


def linger(seconds):
    time.sleep(seconds)
    return seconds


@check
def calls_queued_behind_a_slow_one_move_to_a_free_worker(ex):
    """A function measured as slow goes one call a task, two tasks a thread on their
    way; a task the scheduler queued on a worker behind a call that runs long moves to
    a free worker within a fraction of a second (ProcessPoolExecutor: no wait)."""
    if len(ex.worker_memory_limits()) < 2:
        return
    ex.submit(linger, 0.3).result(timeout=scaled(30))  # measured: 0.3 s a call
    slow = ex.submit(linger, scaled(2))
    quick = [ex.submit(linger, 0) for _ in range(6)]
    quick_calls_done(quick, slow, scaled(1.2))  # 2 s with Dask's own pace (stealing: 1 s)
    slow.result(timeout=scaled(30))


@check
def a_call_given_back_still_feeds_the_call_that_takes_it(ex):
    """A future already sent behind a slow call in a bundle, then passed to another call,
    reaches that call with its value once its worker gives it back."""
    list(ex.map(drowse, [0] * 200))
    slow = ex.submit(drowse, scaled(1))
    quick = [ex.submit(drowse, 0) for _ in range(5)]
    wait_until(lambda: quick[-1].running() or quick[-1].done(), scaled(10),
               "the quick calls were sent")
    dependent = ex.submit(add, quick[-1], 7)
    assert dependent.result(timeout=scaled(30)) == 7
    slow.result(timeout=scaled(30))


@check
def map_does_not_keep_yielded_results(ex):
    results = ex.map(make_payload, range(6))
    first = next(results)
    ref = weakref.ref(first)
    del first
    rest = list(results)
    assert [p.n for p in rest] == [1, 2, 3, 4, 5]
    gc.collect()
    assert ref() is None, "map's iterator still holds a yielded result"


@check
def exceptions_keep_type_and_remote_traceback(ex):
    future = ex.submit(raise_custom)
    error = future.exception(timeout=30)
    assert type(error) is CustomError, type(error)
    assert isinstance(error.__cause__, hpcfutures.RemoteTraceback)
    text = str(error.__cause__)
    assert "raise_custom" in text and "custom failure on purpose" in text, text
    assert " on " in text.splitlines()[2], text  # "Traceback from <who> on <host>:"
    try:
        future.result()
    except CustomError:
        pass
    else:
        raise AssertionError("result() of a failed call returned instead of raising")


@check
def wait_as_completed_and_callbacks_work(ex):
    futures = [ex.submit(sleep_then, 0.05 * (i % 3), i) for i in range(9)]
    done, not_done = cf.wait(futures, timeout=30)
    assert not not_done and len(done) == 9
    assert sorted(f.result() for f in cf.as_completed(futures, timeout=30)) == list(range(9))
    fired = threading.Event()
    seen = []
    future = ex.submit(square, 3)
    future.add_done_callback(lambda f: (seen.append(f.result()), fired.set()))
    assert fired.wait(30) and seen == [9]
    fast = ex.submit(square, 2)
    slow = ex.submit(sleep_then, 2, "slow")
    first = cf.wait([slow, fast], return_when=cf.FIRST_COMPLETED, timeout=30)
    assert fast in first.done and fast.result() == 4
    slow.cancel()


@check
def cancel_works_for_tasks_not_started(ex):
    blockers = [ex.submit(sleep_then, 1.0) for _ in range(16)]
    late = ex.submit(square, 5)
    assert late.cancel(), "a queued task could not be cancelled"
    assert late.cancelled()
    try:
        late.result(timeout=1)
    except cf.CancelledError:
        pass
    else:
        raise AssertionError("a cancelled future returned a result")
    for blocker in blockers:
        blocker.cancel()
    done = ex.submit(square, 6)
    assert done.result(timeout=30) == 36
    assert not done.cancel(), "a finished task reported cancelled"


@check
def a_task_already_sent_cannot_be_cancelled(ex):
    future = ex.submit(sleep_then, 0.5, "ran")
    # No event exists for "started": poll (wait_until fails if it never starts).
    wait_until(lambda: future.running() or future.done(), 10, "the submitted task starting",
               first=0.01)
    assert not future.cancel(), "a task already running reported cancelled"
    assert future.result(timeout=30) == "ran"


@check
def tasks_are_impure(ex):
    first = ex.submit(lambda: os.urandom(16))
    second = ex.submit(lambda: os.urandom(16))
    assert first.result(timeout=30) != second.result(timeout=30)


@check
def futures_as_arguments_are_dependencies(ex):
    a = ex.submit(square, 3)
    b = ex.submit(add, a, y=1)
    assert b.result(timeout=30) == 10
    parts = [ex.submit(square, i) for i in range(5)]
    assert ex.submit(total, parts).result(timeout=30) == sum(i * i for i in range(5))
    assert list(ex.map(add, [a, b], [1, 1])) == [10, 11]


@check
def lambdas_closures_and_main_functions_travel(ex):
    offset = 11
    assert ex.submit(lambda x: x + offset, 1).result(timeout=30) == 12

    def nested(x):
        return x * offset
    assert list(ex.map(nested, [1, 2])) == [11, 22]


@check
def unpicklable_task_fails_on_its_future_and_executor_stays_usable(ex):
    lock = threading.Lock()
    try:
        future = ex.submit(lambda: lock)  # closure over an unpicklable lock
        error = future.exception(timeout=30)
    except (TypeError, pickle.PicklingError) as err:  # raised at submit: also allowed
        error = err
    assert error is not None, "an unpicklable task did not fail"
    assert "pickl" in str(error).lower() or "lock" in str(error).lower(), error
    assert ex.submit(square, 4).result(timeout=30) == 16


def return_a_lock(_=None):
    return threading.Lock()


@check
def unpicklable_result_fails_only_its_future(ex):
    for _ in range(2):  # the second round is bundled with the good calls
        futures = [ex.submit(square, i) for i in range(5)]
        bad = ex.submit(return_a_lock)
        futures += [ex.submit(square, i) for i in range(5, 10)]
        error = bad.exception(timeout=30)
        assert isinstance(error, TypeError) and "could not be pickled" in str(error), error
        assert [f.result(timeout=30) for f in futures] == [i * i for i in range(10)]
    results = ex.map(return_a_lock, range(3))
    try:
        next(results)
    except TypeError as err:
        assert "could not be pickled" in str(err)
    else:
        raise AssertionError("an unpicklable map result was yielded")
    assert ex.submit(square, 3).result(timeout=30) == 9


@check
def foreign_futures_are_refused(ex):
    with cf.ThreadPoolExecutor(1) as pool:
        foreign = pool.submit(square, 2)
        # at the top level, and nested in a list, a tuple, a dict (the same clear refusal)
        for args, kwargs in [((foreign,), {}), (([1, foreign],), {}),
                             (((0, (foreign,)),), {}), ((1,), {"b": {"x": [foreign]}})]:
            try:
                ex.submit(add, *args, **kwargs)
            except TypeError as err:
                assert "another executor" in str(err), err
            else:
                raise AssertionError(f"a foreign future was accepted in {args} {kwargs}")


def exit_with(code):
    sys.exit(code)


class ExitsWhenPickled:
    """A result whose pickling calls sys.exit() (on the worker, as it is sent back)."""

    def __reduce__(self):
        sys.exit(5)


def return_exits_when_pickled(_=None):
    return ExitsWhenPickled()


@check
def sys_exit_in_a_call_is_that_calls_exception(ex):
    started = time.monotonic()
    for _ in range(2):  # the second round is bundled with the good calls
        good = [ex.submit(square, i) for i in range(3)]
        exiting = ex.submit(exit_with, 3)
        pickled = ex.submit(return_exits_when_pickled)
        for future, code in ((exiting, 3), (pickled, 5)):
            error = future.exception(timeout=30)
            assert type(error) is SystemExit and error.code == code, repr(error)
            assert isinstance(error.__cause__, hpcfutures.RemoteTraceback), error.__cause__
        assert [f.result(timeout=30) for f in good] == [0, 1, 4]
    for fn, code in ((exit_with, 4), (return_exits_when_pickled, 5)):
        results = ex.map(fn, [code])
        try:
            next(results)
        except SystemExit as err:
            assert err.code == code, err.code
        else:
            raise AssertionError("map yielded the result of a call that exited")
    # a dependent call (sent alone, not in a bundle) too
    first = ex.submit(square, 2)
    assert ex.submit(exit_with, first).exception(timeout=30).code == 4
    assert ex.submit(square, 5).result(timeout=30) == 25  # no worker died
    assert time.monotonic() - started < scaled(20)


class UsersBaseException(BaseException):
    """A BaseException of the user's own (neither Exception nor one of Python's)."""


def raise_base(kind):
    raise {"KeyboardInterrupt": KeyboardInterrupt("raised by the call"),
           "GeneratorExit": GeneratorExit("raised by the call"),
           "users": UsersBaseException("raised by the call")}[kind]


@check
def every_base_exception_a_call_raises_is_that_calls_outcome(ex):
    """As with ProcessPoolExecutor: a KeyboardInterrupt (or any BaseException) raised
    by a call fails that call's future; no worker dies, the executor carries on."""
    for kind, expected in (("KeyboardInterrupt", KeyboardInterrupt),
                           ("GeneratorExit", GeneratorExit), ("users", UsersBaseException)):
        error = ex.submit(raise_base, kind).exception(timeout=30)
        assert type(error).__name__ == expected.__name__, repr(error)
        assert str(error) == "raised by the call", repr(error)
        assert ex.submit(square, 3).result(timeout=30) == 9
    results = ex.map(raise_base, ["KeyboardInterrupt"])
    try:
        next(results)
    except KeyboardInterrupt as err:
        assert str(err) == "raised by the call"
    else:
        raise AssertionError("map yielded the result of a call that raised")


def arguments(*args, **kwargs):
    return args, kwargs


@check
def keyword_arguments_of_any_name_reach_the_function(ex):
    """``self``, ``fn`` and the names Dask's own submit takes are the user's keywords."""
    names = ["self", "fn", "key", "args", "kwargs", "func", "pure", "workers", "resources",
             "retries", "priority", "allow_other_workers", "actor", "timeout", "chunksize"]
    futures = {name: ex.submit(arguments, 1, **{name: 2}) for name in names}
    for name, future in futures.items():
        assert future.result(timeout=30) == ((1,), {name: 2}), name
    assert ex.submit(arguments, 1, self=2, fn=3).result(timeout=30) == ((1,), {"self": 2,
                                                                          "fn": 3})


@check
def a_callback_that_raises_is_logged_and_the_executor_carries_on(ex):
    """A done-callback's exception, SystemExit included, goes no further than the log."""
    import logging

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    seen = Seen()
    log = logging.getLogger("concurrent.futures")
    log.addHandler(seen)
    try:
        called = threading.Event()

        def leave(_):
            called.set()
            raise SystemExit(5)

        future = ex.submit(sleep_then, 0.2, 1)
        future.add_done_callback(leave)
        assert future.result(timeout=30) == 1
        assert called.wait(30)
        assert ex.submit(square, 4).result(timeout=30) == 16
        wait_until(lambda: seen.records, 10, "the callback's SystemExit logged")
        assert seen.records[0].exc_info[0] is SystemExit
    finally:
        log.removeHandler(seen)


@check
def serialization_errors_are_type_and_pickling_errors(ex):
    lock = threading.Lock()
    for future in (ex.submit(square, lock), ex.submit(return_a_lock)):
        try:
            future.result(timeout=30)
        except pickle.PicklingError as err:  # what ProcessPoolExecutor code catches
            assert isinstance(err, TypeError) and isinstance(err, hpcfutures.SerializationError)
        else:
            raise AssertionError("an unpicklable call or result did not fail")
    try:
        next(ex.map(return_a_lock, [1]))
    except pickle.PicklingError as err:
        assert isinstance(err, hpcfutures.SerializationError)
    else:
        raise AssertionError("an unpicklable map result was yielded")


def payload_size(payload):
    return payload.n


@check
def a_finished_future_releases_call_and_result_without_gc(ex):
    gc.disable()  # refcounting alone must free them: no reference cycle may hold them
    try:
        for _ in range(2):  # the second round is bundled
            argument = Payload(3)
            arg_ref = weakref.ref(argument)
            futures = [ex.submit(payload_size, argument), ex.submit(make_payload, 4)]
            futures += [ex.submit(square, i) for i in range(4)]
            assert futures[0].result(timeout=30) == 3
            result = futures[1].result(timeout=30)
            res_ref = weakref.ref(result)
            [f.result(timeout=30) for f in futures]
            del argument, result, futures
            wait_until(lambda a=arg_ref, r=res_ref: a() is None and r() is None, 5,
                       "the finished calls' argument and result to be freed", first=0.01)
    finally:
        gc.enable()


class Kept:
    """A result kept on a worker whose pickling calls sys.exit() (when it is fetched)."""

    def __reduce__(self):
        sys.exit(6)


def keep_exiting_result(_=None):
    return Kept()


def type_name(value):
    return type(value).__name__


@check
def sys_exit_while_a_kept_result_is_pickled_is_that_futures_exception(ex):
    """A result that stays on its worker until the client or another worker fetches it
    (a call sent alone, or a bundled call's value once it is an argument)."""
    started = time.monotonic()
    first = ex.submit(square, 2)
    alone = ex.submit(keep_exiting_result, first)  # depends: sent alone, result kept
    bundled = ex.submit(keep_exiting_result)  # its value is picked out for the dependents
    dependents = [ex.submit(type_name, alone), ex.submit(type_name, bundled)]
    for future in [alone, bundled, *dependents]:
        error = future.exception(timeout=30)
        assert type(error) is SystemExit and error.code == 6, repr(error)
    results = ex.map(type_name, [bundled])
    try:
        next(results)
    except SystemExit as err:
        assert err.code == 6, err.code
    else:
        raise AssertionError("map yielded a call whose argument could not be fetched")
    assert ex.submit(square, 5).result(timeout=30) == 25  # no worker died
    assert time.monotonic() - started < scaled(20)


INITIALIZED: list = []


def mark_initialized(tag):
    """The contract's initializer: once per worker process, before its first call."""
    INITIALIZED.append(tag)


EXECUTOR_OPTIONS["initializer"] = mark_initialized


def initialization(_=None):
    return os.getpid(), tuple(INITIALIZED)


@check
def initializer_ran_once_in_every_worker_before_its_calls(ex):
    if ex._session.settings.initializer is None:  # connect(): a serving launch's workers
        return
    first = ex.submit(square, 1)
    futures = [ex.submit(initialization) for _ in range(16)]
    futures.append(ex.submit(initialization, first))  # sent alone
    seen = dict(f.result(timeout=30) for f in futures)
    seen.update(ex.map(initialization, range(20)))
    assert seen and all(marks == ("ready",) for marks in seen.values()), seen


@check
def tasks_run_outside_the_client(ex):
    pids = {f.result(timeout=30) for f in [ex.submit(where) for _ in range(4)]}
    assert os.getpid() not in pids


def run_all(ex, names=None, out=print) -> int:
    """Run the checks on ``ex``; print PASS/FAIL lines; return the number failed."""
    import traceback

    failed = 0
    for fn in CHECKS:
        if names and fn.__name__ not in names:
            continue
        started = time.monotonic()
        try:
            fn(ex)
        except Exception:
            failed += 1
            out(f"FAIL {fn.__name__}\n{traceback.format_exc()}")
        else:
            out(f"PASS {fn.__name__} ({time.monotonic() - started:.2f} s)")
    return failed
