"""A lone call goes straight to a worker when nothing else is in flight (``core/direct.py``).

End to end on the laptop default's real worker processes; what a launcher adds
(the scheduler in a process of its own, lost under a call) is in test_failures.py
and test_crashes.py, whose single calls go this way too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import distributed
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


def ready_lane(ex, *short):
    """The executor's lane, once both workers of ``Executor(2)`` have joined and the
    client knows them: the roster is filled right after the start, and a call made
    before that goes through the scheduler; the tests of a second call running beside
    a first need the second worker (on a loaded machine it can join seconds after
    the first).  The functions ``short`` are taken as measured short (a function's
    first call goes the usual way, and a long one always does): a test of what
    happens *while* a direct call runs needs a long one sent this way."""
    workers_joined(ex, 2)
    wait_until(lambda: len(list(ex._bridge.roster.seen)) >= 2, 30,
               "the executor knowing its workers")
    for fn in short:
        ex._bridge.batcher.durations.record(fn, 0.0)
    return lane(ex)


def lane(ex):
    """The executor's lane, for its counts."""
    return ex._bridge.direct


def test_a_lone_call_goes_straight_to_a_worker_and_one_beside_others_through_the_scheduler():
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex)
        # The first call of inc goes through the scheduler, and measures it ...
        assert ex.submit(inc, 0).result() == 1 and lane(ex).sent == 0
        for i in range(1, 30):  # (its first call's time counts unpickling it, and
            if lane(ex).sent:   # its end, with that time, may come after its result)
                break
            assert ex.submit(inc, i).result() == i + 1
        assert lane(ex).sent == 1, "inc never known to be short"
        # ... then each lone call of it goes straight to a worker.
        assert [ex.submit(inc, i).result() for i in range(4)] == [1, 2, 3, 4]
        assert lane(ex).sent == 5
        # Two in flight: the second has a scheduler's placement to decide.
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        second = ex.submit(inc, 2)
        assert (first.result(), second.result()) == (2, 3)
        assert lane(ex).sent == 5
        pid, address = ex.submit(worker_details).result()
        assert pid != os.getpid() and address.startswith("tls://"), "not run on a worker"


def test_a_long_call_goes_through_the_scheduler_so_the_next_one_runs_beside_it(tmp_path):
    """Unseen by the scheduler, a long direct call would leave its worker idle to the
    scheduler's eyes, and the next call placed there would wait for it.  Before, that
    ran an MPI call's ranks after a plain call instead of beside it, one time in a few."""
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, inc)
        assert ex.submit(inc, 1).result() == 2 and lane(ex).sent == 1
        for _ in range(3):
            marker = tmp_path / "first-runs"
            first = ex.submit(spans, 1.0, str(marker))
            wait_until(marker.exists, 30, "the first call running")
            second = ex.submit(spans, 1.0)
            (start_1, end_1), (start_2, end_2) = first.result(), second.result()
            assert max(start_1, start_2) < min(end_1, end_2), "one waited for the other"
            marker.unlink()
        assert lane(ex).sent == 1


def test_calls_submitted_while_a_lone_call_is_out_wait_for_its_answer(tmp_path):
    """Nothing is sent while a call is out straight to a worker: sent at once, a call
    could be placed on that worker (idle to the scheduler's eyes) and wait behind it,
    or, on a worker of one thread, start first and hold the lone call behind a slow
    call of its own (a contract check failed so in CI, on a launch of one worker)."""
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, spans, inc)
        marker = tmp_path / "runs"
        first = ex.submit(spans, 1.0, str(marker))
        wait_until(marker.exists, 30, "the lone call running")
        assert lane(ex).sent == 1, "the lone call did not go straight to a worker"
        later = [ex.submit(inc, i) for i in range(3)]
        wait_until(lambda: first.done() or any(f.running() for f in later), 30,
                   "the lone call's answer, or a later call sent")
        assert first.done(), "a later call was sent while the lone call was out"
        assert [f.result(timeout=30) for f in later] == [1, 2, 3]


def test_a_direct_calls_error_is_its_own_with_the_workers_traceback():
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, boom)
        error = ex.submit(boom, 3).exception()
        assert lane(ex).sent == 1
    assert type(error) is ValueError and str(error) == "boom 3"
    assert "Traceback from local worker" in str(error.__cause__), error.__cause__


def test_a_large_result_of_a_direct_call_comes_in_its_answer_never_fetched(monkeypatch):
    gathers: list[object] = []
    real_gather = distributed.Client.gather

    def counted(self, futures, *args, **kwargs):
        gathers.append(futures)
        return real_gather(self, futures, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "gather", counted)
    large = b"z" * (4 * 2**20)
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, add)
        assert ex.submit(add, large, b"!").result() == large + b"!"
        assert lane(ex).sent == 1
    assert gathers == []


def test_a_call_on_a_running_direct_call_waits_for_it_and_on_a_failed_one_fails_with_its_error():
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, slow_inc, boom)
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        dependent = ex.submit(add, first, 10)  # sent while the first still runs
        assert dependent.result() == 12
        failed = ex.submit(boom, 4)
        failed.exception()
        error = ex.submit(add, failed, 1).exception()
        assert lane(ex).sent == 2
    assert type(error) is ValueError and str(error) == "boom 4"


def test_a_chain_on_a_running_direct_call_waits_link_by_link():
    """A call waiting for a direct call is not sent yet: a call on *it* waits too
    (before, that one failed as if its argument belonged to a stopped executor)."""
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, slow_inc)
        first = ex.submit(slow_inc, 1, 1.0)
        wait_until(first.running, 30, "the first call sent")
        chain = [first]
        for step in range(4):
            chain.append(ex.submit(add, chain[-1], 10 ** step))
        side = ex.submit(add, chain[2], chain[1])
        assert [link.result(timeout=60) for link in chain] == [2, 3, 13, 113, 1113]
        assert side.result(timeout=60) == 16
        assert lane(ex).sent == 1


def test_a_direct_call_that_kills_its_worker_fails_alone_and_the_other_worker_serves_on():
    """Its death certificate names the call, as for a task.  The call *is* ``os._exit``,
    which travels as ``posix._exit``: the worker's watch covers that name too (before,
    such a call killed every worker in turn, each death blamed on no call)."""
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, os._exit)
        error = ex.submit(os._exit, 3).exception()
        assert lane(ex).sent == 1
        assert isinstance(error, hpcfutures.WorkerCrashError), error
        assert "exit" in str(error).lower(), error
        assert ex.submit(inc, 41).result() == 42  # once, not again and again: one worker died


def test_a_direct_call_whose_worker_is_killed_from_outside_runs_again_elsewhere(tmp_path):
    told = tmp_path / "pid"
    with hpcfutures.Executor(2) as ex:
        ready_lane(ex, pid_then_nap)
        future = ex.submit(pid_then_nap, str(told), 2.0)
        victim = int(wait_until(lambda: told.exists() and told.read_text(), 30,
                                "the call telling its worker's pid"))
        os.kill(victim, signal.SIGKILL)
        survivor = future.result(timeout=60)
        assert lane(ex).sent == 1 and lane(ex).rerouted == 1
    assert survivor not in (victim, os.getpid())


@pytest.mark.parametrize("option", [{"summary": True}, {"release_idle_after": 60}])
def test_where_the_scheduler_must_see_every_call_none_goes_straight_to_a_worker(option):
    with hpcfutures.Executor(2, **option) as ex:
        ready_lane(ex, inc)
        assert ex.submit(inc, 1).result() == 2
        assert lane(ex).sent == 0


def test_calls_submitted_from_many_threads_at_once_all_come_back():
    """Direct or not, decided per call on the loop: nothing is lost or sent twice."""
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
