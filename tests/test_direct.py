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
from waiting import wait_until

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


def lane(ex):
    """The executor's lane, once it knows a worker: the roster is filled right after the
    start, and a call made before that goes through the scheduler."""
    direct = ex._bridge.direct
    wait_until(lambda: list(direct._workers()), 30, "the executor knowing its workers")
    return direct


def test_a_lone_call_goes_straight_to_a_worker_and_one_beside_others_through_the_scheduler():
    with hpcfutures.Executor(2) as ex:
        lane(ex)
        assert [ex.submit(inc, i).result() for i in range(5)] == [1, 2, 3, 4, 5]
        assert lane(ex).sent == 5
        # Two in flight: the second has a scheduler's placement to decide.
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        second = ex.submit(inc, 2)
        assert (first.result(), second.result()) == (2, 3)
        assert lane(ex).sent == 6
        pid, address = ex.submit(worker_details).result()
        assert pid != os.getpid() and address.startswith("tls://"), "not run on a worker"


def test_a_direct_calls_error_is_its_own_with_the_workers_traceback():
    with hpcfutures.Executor(2) as ex:
        lane(ex)
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
        lane(ex)
        assert ex.submit(add, large, b"!").result() == large + b"!"
        assert lane(ex).sent == 1
    assert gathers == []


def test_a_call_on_a_running_direct_call_waits_for_it_and_on_a_failed_one_fails_with_its_error():
    with hpcfutures.Executor(2) as ex:
        lane(ex)
        first = ex.submit(slow_inc, 1, 0.5)
        wait_until(first.running, 30, "the first call sent")
        dependent = ex.submit(add, first, 10)  # sent while the first still runs
        assert dependent.result() == 12
        failed = ex.submit(boom, 4)
        failed.exception()
        error = ex.submit(add, failed, 1).exception()
        assert lane(ex).sent >= 2
    assert type(error) is ValueError and str(error) == "boom 4"


def test_a_direct_call_that_kills_its_worker_fails_alone_and_the_other_worker_serves_on():
    """Its death certificate names the call, as for a task.  The call *is* ``os._exit``,
    which travels as ``posix._exit``: the worker's watch covers that name too (before,
    such a call killed every worker in turn, each death blamed on no call)."""
    with hpcfutures.Executor(2) as ex:
        lane(ex)
        error = ex.submit(os._exit, 3).exception()
        assert lane(ex).sent == 1
        assert isinstance(error, hpcfutures.WorkerCrashError), error
        assert "exit" in str(error).lower(), error
        assert ex.submit(inc, 41).result() == 42  # once, not again and again: one worker died


def test_a_direct_call_whose_worker_is_killed_from_outside_runs_again_elsewhere(tmp_path):
    told = tmp_path / "pid"
    with hpcfutures.Executor(2) as ex:
        lane(ex)
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
        lane(ex)
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
