"""Lone calls and the calls around them, on the one route (``core/engine.py``).

End to end on the laptop default's real worker processes: a call waits for the
calls it takes as arguments, even while they run; a call that kills its worker
fails alone; one whose worker is killed from outside runs again; a long call
leaves the other worker free.  What a launcher adds (the scheduler in a process
of its own, lost under a call) is in test_failures.py and test_crashes.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_until, workers_joined

import hpcfutures

pytestmark = pytest.mark.timeout(120)


def inc(x):
    return x + 1


def add(a, b):
    return a + b


def boom(x):
    raise ValueError(f"boom {x}")


def slow_inc(x, seconds):
    time.sleep(seconds)
    return x + 1


def pid_then_nap(path, seconds):
    """Tell the test which process runs this call, then take long enough to be killed."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()


def worker_details():
    from distributed.worker import get_worker

    return os.getpid(), str(get_worker().address)


def spans(seconds, marker=None):
    """When it ran, by the worker's clock (the same machine's as the test's)."""
    started = time.monotonic()
    if marker:
        Path(marker).touch()  # says it runs
    time.sleep(seconds)
    return started, time.monotonic()


def measured_short(ex, fn, *args):
    """Both workers of ``Executor(2)`` joined, and ``fn`` called until the client has
    measured it (a function's first calls are timed): lone calls at their quickest."""
    workers_joined(ex, 2)
    for _ in range(5):
        ex.submit(fn, *args).exception()


def test_lone_calls_run_on_the_workers_and_one_beside_another_is_not_held_back():
    with hpcfutures.Executor(2) as ex:
        measured_short(ex, inc, 0)
        assert [ex.submit(inc, i).result() for i in range(20)] == list(range(1, 21))
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        second = ex.submit(inc, 2)
        assert (first.result(), second.result()) == (2, 3)
        pid, address = ex.submit(worker_details).result()
        assert pid != os.getpid() and address.startswith("tls://"), "not run on a worker"


def test_a_long_call_leaves_the_other_worker_to_the_next_call(tmp_path):
    """The scheduler sees every call: the next one goes to the idle worker, not behind
    the long one (the removed direct lane's calls were unseen, and an MPI call's ranks
    once ran after such a call instead of beside it)."""
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        assert ex.submit(inc, 1).result() == 2
        for _ in range(3):
            marker = tmp_path / "first-runs"
            first = ex.submit(spans, 1.0, str(marker))
            wait_until(marker.exists, 30, "the first call running")
            second = ex.submit(spans, 1.0)
            (start_1, end_1), (start_2, end_2) = first.result(), second.result()
            assert max(start_1, start_2) < min(end_1, end_2), "one waited for the other"
            marker.unlink()


def test_a_lone_calls_error_is_its_own_with_the_workers_traceback():
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        error = ex.submit(boom, 3).exception()
    assert type(error) is ValueError and str(error) == "boom 3"
    assert "Traceback from local worker" in str(error.__cause__), error.__cause__


def test_a_call_on_a_running_call_waits_for_it_and_on_a_failed_one_fails_with_its_error():
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        dependent = ex.submit(add, first, 10)  # sent while the first still runs
        assert dependent.result() == 12
        failed = ex.submit(boom, 4)
        failed.exception()
        error = ex.submit(add, failed, 1).exception()
    assert type(error) is ValueError and str(error) == "boom 4"


def test_a_call_on_a_call_that_could_not_be_sent_fails_with_that_calls_error():
    """Its argument's error, naming the function that cannot be pickled: not one saying
    the dependent itself could not be sent (it could)."""
    lock = threading.Lock()
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        unsendable = ex.submit(lambda: lock)
        own = unsendable.exception()
        error = ex.submit(add, unsendable, 1).exception()
        assert ex.submit(add, 1, 1).result() == 2
    assert isinstance(own, hpcfutures.SerializationError), own
    assert type(error) is type(own) and str(error) == str(own), (error, own)
    assert "'add'" not in str(error), error


def test_a_chain_on_a_running_call_waits_link_by_link():
    """Each link is sent while the one before it still runs, and waits for it on the
    cluster."""
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        first = ex.submit(slow_inc, 1, 1.0)
        wait_until(first.running, 30, "the first call sent")
        chain = [first]
        for step in range(4):
            chain.append(ex.submit(add, chain[-1], 10 ** step))
        side = ex.submit(add, chain[2], chain[1])
        assert [link.result(timeout=60) for link in chain] == [2, 3, 13, 113, 1113]
        assert side.result(timeout=60) == 16


def test_a_lone_call_that_kills_its_worker_fails_alone_and_the_other_worker_serves_on():
    """Its death certificate names the call, as for a task.  The call *is* ``os._exit``,
    which travels as ``posix._exit``: the worker's watch covers that name too (before,
    such a call killed every worker in turn, each death blamed on no call)."""
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        error = ex.submit(os._exit, 3).exception()
        assert isinstance(error, hpcfutures.WorkerCrashError), error
        assert "exit" in str(error).lower(), error
        assert ex.submit(inc, 41).result() == 42  # once, not again and again: one worker died


def test_a_lone_call_whose_worker_is_killed_from_outside_runs_again_elsewhere(tmp_path):
    told = tmp_path / "pid"
    with hpcfutures.Executor(2) as ex:
        workers_joined(ex, 2)
        future = ex.submit(pid_then_nap, str(told), 2.0)
        victim = int(wait_until(lambda: told.exists() and told.read_text(), 30,
                                "the call telling its worker's pid"))
        os.kill(victim, signal.SIGKILL)
        survivor = future.result(timeout=60)
    assert survivor not in (victim, os.getpid())


def test_calls_submitted_from_many_threads_at_once_all_come_back():
    """Nothing is lost or sent twice."""
    results: dict[int, int] = {}

    def loop(start: int) -> None:
        for i in range(start, start + 50):
            results[i] = ex.submit(inc, i).result()

    with hpcfutures.Executor(2) as ex:
        threads = [threading.Thread(target=loop, args=(k * 100,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert results == {i: i + 1 for k in range(4) for i in range(k * 100, k * 100 + 50)}


def test_a_call_on_a_call_whose_bundles_task_is_gone_gets_its_value_or_its_error():
    """When sending a bundle again failed, nothing on the cluster holds its calls' values:
    a call that takes one of them as an argument carries the value itself, or fails
    with the argument's own error (unit: the sender, with a stand-in Dask client)."""
    from types import SimpleNamespace

    from helpers import engine_stub

    from hpcfutures._facade.core.futures import TaskFuture, settle
    from hpcfutures._facade.core.sending import Sender
    from hpcfutures._remote.calls import run_task

    sent = []

    class Client:
        def map(self, runner, *columns, key, pure):
            sent.extend(zip(*columns, strict=True))
            return [object() for _ in key]

    sender = Sender(Client(), engine_stub(completions=SimpleNamespace(follow=lambda *_: None)))
    bundle = TaskFuture()  # its task is gone: no Dask future
    good, bad = TaskFuture(), TaskFuture()
    good._call.in_bundle(bundle, 0)
    bad._call.in_bundle(bundle, 1)
    settle(good, result=41)
    settle(bad, exception=ValueError("boom 1"))
    on_good, on_bad = TaskFuture(), TaskFuture()
    sender.send_queued([(on_good, run_task, add, (good, 1), {}, True),
                        (on_bad, run_task, add, (bad, 1), {}, True)])
    [(_fn, (box, *dependencies), _kwargs)] = sent  # the call on the failed one: not sent
    assert box.args == (41, 1) and dependencies == [], (box, dependencies)
    assert type(on_bad.exception(0)) is ValueError and str(on_bad.exception(0)) == "boom 1"
