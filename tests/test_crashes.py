"""A call that kills its worker's process fails fast, naming why; the others run again.

Unit tests first (the slot, the watcher's reading of a worker's last words,
the certificate, the client's bookkeeping), without processes; then the
crash job (tests/jobs/crash_job.py) under every launcher, timed for the
failure matrix (docs/failures.rst).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from helpers import LAPTOP_WORKERS, engine_stub, record_failure_time, untagged, wait_until

import hpcfutures
from hpcfutures._facade.core.futures import TaskFuture
from hpcfutures._facade.core.recovery import MAX_LOSSES, Recovery, crash_error
from hpcfutures._remote import deathwatch, watcher
from hpcfutures._remote.calls import (
    fail_with,
    restore_traceback,
    run_bundle,
    run_chunk,
    run_chunk_task,
    run_task,
)

FAULTHANDLER_REPORT = b"""Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f00000000aa (most recent call first):
  File "/home/ada/job.py", line 12 in crash
  File "/home/ada/job.py", line 20 in crash_at_seven
"""


# ------------------------------------------------------------------ the slot
@pytest.fixture
def slot(monkeypatch):
    """A slot as a watched worker has it, with a fixed task key."""
    table = deathwatch.Slot(deathwatch._shared_memory_fd())
    monkeypatch.setattr(deathwatch, "_slot", table)
    monkeypatch.setattr(deathwatch, "_current_key", lambda: "hpcf-1234-crash-7")
    yield table
    table.memory.close()
    os.close(table.fd)


def test_the_slot_names_the_running_call_and_forgets_it_when_done(slot):
    seen = []

    def look(x):
        seen.append(watcher.read_slot(slot.memory))
        return x

    run_chunk(look, [(1,), (2,), (3,)])
    assert [s[0]["index"] for s in seen] == [0, 1, 2]
    assert {s[0]["key"] for s in seen} == {"hpcf-1234-crash-7"}
    assert seen[0][0]["function"].endswith("look")
    assert seen[0][0]["thread"] == threading.get_ident()
    assert watcher.read_slot(slot.memory) == [], "a finished chunk still looks running"
    run_bundle([(look, (1,), {}), (look, (2,), {})])
    assert [s[0]["index"] for s in seen[3:]] == [0, 1]
    run_task(look, (1,), {})
    assert seen[-1][0]["index"] == 0 and watcher.read_slot(slot.memory) == []


def test_each_thread_has_its_own_row(slot):
    inside = threading.Barrier(3)

    def wait_inside(x):
        inside.wait(5)
        inside.wait(5)
        return x

    threads = [threading.Thread(target=run_chunk, args=(wait_inside, [(i,)])) for i in (1, 2)]
    for thread in threads:
        thread.start()
    inside.wait(5)
    running = watcher.read_slot(slot.memory)
    inside.wait(5)
    for thread in threads:
        thread.join(5)
    assert sorted(r["thread"] for r in running) == sorted(t.ident for t in threads)


def test_recording_a_call_costs_well_under_a_microsecond(slot, capsys):
    """The per-call price of knowing which call runs (measured, and reported)."""
    items = [(i,) for i in range(200_000)]

    def best(runs=5):
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            run_chunk(abs, items)
            times.append(time.perf_counter() - started)
        return min(times) / len(items)

    watched = best()
    deathwatch._slot = None
    unwatched = best()
    overhead = watched - unwatched
    with capsys.disabled():
        print(f"\nper call: {unwatched * 1e9:.0f} ns unwatched, {watched * 1e9:.0f} ns watched "
              f"(+{overhead * 1e9:.0f} ns)")
    assert overhead < 1e-6, f"{overhead * 1e9:.0f} ns per call"


# ------------------------------------------------------------- last words
def test_last_words_of_a_segfault_name_the_signal_and_the_thread():
    said = watcher.last_words(FAULTHANDLER_REPORT)
    assert said["how"] == "signal" and said["signal"] == "SIGSEGV"
    assert said["thread"] == 0x7F00000000AA
    assert said["report"].startswith("Fatal Python error: Segmentation fault")


def test_last_words_of_an_exit_and_of_a_goodbye_and_of_silence():
    assert watcher.last_words(watcher.EXIT_WORD + b"3 140\n") | {"report": ""} == {
        "how": "exit", "status": 3, "signal": None, "thread": 140, "report": ""}
    assert watcher.last_words(watcher.EXIT_WORD + b"0 1\n" + watcher.GOODBYE_WORD) == {
        "how": "goodbye"}
    assert watcher.last_words(b"")["how"] == "killed"
    assert watcher.last_words(b"Fatal Python error: Aborted\n\n")["signal"] == "SIGABRT"


CONFIG = {"worker": "tls://10.0.0.7:4711", "who": "rank 3 (slurm) on node17", "pid": 99}
RUNNING = [{"key": "k-1", "index": 4, "function": "job.other", "thread": 1},
           {"key": "k-2", "index": 7, "function": "job.crash_at_seven", "thread": 0xAA}]


def test_the_certificate_blames_the_call_on_the_thread_that_died():
    said = watcher.last_words(FAULTHANDLER_REPORT.replace(b"7f00000000aa", b"00000000000000aa"))
    cert = watcher.certificate(CONFIG, said, RUNNING)
    assert cert["culprit"] == RUNNING[1] and cert["signal"] == "SIGSEGV"
    line = watcher.describe(cert)
    assert "rank 3 (slurm) on node17 was killed by SIGSEGV running job.crash_at_seven" in line
    exited = watcher.certificate(CONFIG, watcher.last_words(watcher.EXIT_WORD + b"3 1\n"),
                                 RUNNING)
    assert exited["culprit"] == RUNNING[0] and exited["status"] == 3


def test_a_worker_killed_from_outside_blames_nobody():
    cert = watcher.certificate(CONFIG, watcher.last_words(b""), RUNNING)
    assert cert["culprit"] is None and cert["how"] == "killed"
    assert "run again elsewhere" in watcher.describe(cert)


# --------------------------------------------------------- the crash error
def test_the_crash_error_names_function_how_where_and_what_to_do():
    cert = watcher.certificate(CONFIG, watcher.last_words(FAULTHANDLER_REPORT),
                               [{**RUNNING[1], "thread": 0x7F00000000AA}])
    error = restore_traceback(crash_error(cert))
    text = str(error)
    assert isinstance(error, RuntimeError) and isinstance(error, hpcfutures.HPCFuturesError)
    assert "job.crash_at_seven crashed its worker" in text
    assert "killed by SIGSEGV" in text and "rank 3 (slurm) on node17" in text
    assert "gdb" in text and "faulthandler" in text
    assert "Fatal Python error: Segmentation fault" in str(error.__cause__)
    assert (error.function, error.signal, error.exit_status) == (
        "job.crash_at_seven", "SIGSEGV", None)
    import pickle

    again = pickle.loads(pickle.dumps(crash_error(cert)))
    assert str(again) == text and again.where == "rank 3 (slurm) on node17"


def test_a_chunk_or_bundle_cut_short_carries_the_crash_to_its_place():
    error = hpcfutures.WorkerCrashError("boom")
    outcome = run_chunk_task(abs, ([(-1,), (-2,)],), {"then": error})
    assert outcome.values == [1, 2] and outcome.error is error
    bundle = run_bundle([(abs, (-1,), {}), (fail_with, (error,), {}), (abs, (-3,), {})])
    assert bundle.results == [(True, 1), (False, error), (True, 3)]


# ----------------------------------------------------- the client's bookkeeping
class FakeDask:
    """What Recovery asks of _dask: which worker a task was lost with, its certificate."""

    def __init__(self, certificate=None, none_left=None):
        self.answer = {"certificate": certificate, "none_left": none_left}
        self.asked = []

    @staticmethod
    def lost_worker(exc):
        return exc.args if isinstance(exc, LookupError) else None

    async def death_certificate(self, client, worker, timeout):
        self.asked.append(worker)
        return self.answer

    async def death_certificates(self, client, workers, timeout):
        self.asked.extend(workers)
        return {worker: self.answer for worker in workers}


class DaskFuture:
    def __init__(self, key):
        self.key = key


def recover(recipe, certificate=None, key="k-2", lost_key=None, none_left=None, future=None):
    """Run Recovery on one lost task; what it resent, and what it broke."""
    resent, broken = [], []
    fake = FakeDask(certificate, none_left)

    async def scenario():
        pending = set()
        rec = Recovery(None, engine_stub(
            sender=SimpleNamespace(resend=lambda f, r: resent.append((f, r))),
            break_executor=broken.append,
            in_background=lambda coro: pending.add(asyncio.ensure_future(coro))))
        rec._dask = fake
        task_future = future or TaskFuture()
        task_future._call.recipe = recipe
        assert rec.lost(DaskFuture(key), task_future, LookupError(lost_key or key, "tls://w:1"))
        await asyncio.gather(*pending)
        return task_future

    task_future = asyncio.run(scenario())
    return task_future, resent, broken, fake


def culprit_at(index, key="k-2"):
    return {**CONFIG, "how": "exit", "status": 3, "signal": None, "report": "",
            "running": [], "culprit": {"key": key, "index": index, "function": "job.f",
                                       "thread": 1}}


def test_the_culprit_alone_fails_with_its_crash():
    future, resent, _, fake = recover((run_task, abs, (1,), {}, False), culprit_at(0))
    assert resent == [] and fake.asked == ["tls://w:1"]
    with pytest.raises(hpcfutures.WorkerCrashError, match="exited with status 3"):
        future.result(0)


def test_a_chunk_runs_again_up_to_its_culprit_which_keeps_the_error():
    chunk = [(i,) for i in range(10)]
    _, resent, _, _ = recover((run_chunk_task, abs, (chunk,), {}, False), culprit_at(4))
    (_, (runner, _fn, args, kwargs, _)), = resent
    assert runner is run_chunk_task and args[0] == chunk[:4]
    assert isinstance(kwargs["then"], hpcfutures.WorkerCrashError)
    first, resent, _, _ = recover((run_chunk_task, abs, (chunk,), {}, False), culprit_at(0))
    assert resent == [] and isinstance(first.exception(0), hpcfutures.WorkerCrashError)


def test_a_bundle_runs_again_with_its_culprit_replaced_by_its_error():
    calls = [(abs, (i,), {}) for i in range(3)]
    _, resent, _, _ = recover((run_bundle, None, (calls,), {}, False), culprit_at(1))
    (_, (_, _, (again,), _, _)), = resent
    assert again[0] == calls[0] and again[2] == calls[2] and again[1][0] is fail_with


def test_calls_lost_with_a_worker_they_did_not_kill_run_again_a_bounded_number_of_times():
    recipe = (run_task, abs, (1,), {}, False)
    future = TaskFuture()
    for _ in range(MAX_LOSSES + 2):  # another call killed the worker: no count
        _, resent, _, _ = recover(recipe, culprit_at(0, key="another-task"), future=future)
        assert len(resent) == 1 and future._call.losses == 0
    for attempt in range(MAX_LOSSES):
        _, resent, _, _ = recover(recipe, {**culprit_at(0), "culprit": None}, future=future)
        assert len(resent) == 1, f"attempt {attempt + 1} was not sent again"
    _, resent, _, _ = recover(recipe, None, future=future)  # no certificate: node gone
    assert resent == []
    with pytest.raises(hpcfutures.WorkerCrashError, match=f"lost, {MAX_LOSSES + 1} times"):
        future.result(0)


def test_the_last_death_breaks_the_executor_after_failing_the_culprit():
    future, _, broken, _ = recover((run_task, abs, (1,), {}, False), culprit_at(0),
                                   none_left="no worker is left: rank 3 died")
    assert isinstance(future.exception(0), hpcfutures.WorkerCrashError)
    assert broken == ["no worker is left: rank 3 died"]


def test_a_call_whose_argument_was_lost_waits_for_it_then_runs_again_or_fails_with_it():
    argument = TaskFuture()
    argument.set_result(5)
    recipe = (run_task, abs, (argument,), {}, True)
    _, resent, _, fake = recover(recipe, key="mine", lost_key="the-arguments-task")
    assert len(resent) == 1 and fake.asked == [], "a dependent's own worker is not asked"
    picked = TaskFuture()  # done, but the pick of it out of its bundle was lost
    picked._call.dask, picked._call.bundle = DaskFuture("pick-1"), (TaskFuture(), 0)
    picked._call.dask.status = "error"
    picked.set_result(6)
    _, resent, _, _ = recover((run_task, abs, (picked,), {}, True), key="mine",
                              lost_key="pick-1")
    assert len(resent) == 1 and picked._call.dask is None and picked._call.bundle is None, (
        "a dependent sent again with a lost handle of its argument would be lost again")
    failed = TaskFuture()
    failed.set_exception(hpcfutures.WorkerCrashError("its argument crashed"))
    future, resent, _, _ = recover((run_task, abs, (failed,), {}, True), key="mine",
                                   lost_key="the-arguments-task")
    assert resent == [] and "its argument crashed" in str(future.exception(0))


def test_a_wave_of_dead_workers_is_asked_about_in_one_request():
    """At 2,000 workers a request per dead worker opened 200 connections to the scheduler
    at once; they queued behind the client's others and timed out (16 s, not 9)."""
    fake = FakeDask(None)
    requests = []
    real = fake.death_certificates

    async def counted(client, workers, timeout):
        requests.append(list(workers))
        return await real(client, workers, timeout)

    fake.death_certificates = counted
    resent = []

    async def scenario():
        pending = set()
        rec = Recovery(None, engine_stub(
            sender=SimpleNamespace(resend=lambda f, r: resent.append(f)),
            in_background=lambda coro: pending.add(asyncio.ensure_future(coro))))
        rec._dask = fake
        for n in range(50):  # 50 workers' tasks lost, heard of over two turns of the loop
            future = TaskFuture()
            future._call.recipe = (run_task, abs, (-n,), {}, False)
            assert rec.lost(DaskFuture(f"k-{n}"), future,
                            LookupError(f"k-{n}", f"tls://w:{n % 25}"))
            if n == 24:
                await asyncio.sleep(0)
        await asyncio.gather(*pending)

    asyncio.run(scenario())
    assert len(resent) == 50  # none blamed: each runs again
    assert len(requests) == 1 and sorted(requests[0]) == sorted(f"tls://w:{n}" for n in range(25))


def test_a_done_future_drops_its_recipe():
    future = TaskFuture()
    future._call.recipe = (run_task, abs, ([1] * 10,), {}, False)
    future.set_running_or_notify_cancel()
    future.set_result(1)
    assert future._call.recipe is None


class _DaskFuture:
    """What Completions reads of a Dask future: its status, and a wait for its end."""

    def __init__(self, key: str) -> None:
        self.key, self.status, self.computed = key, "finished", asyncio.Event()
        self.computed.set()

    def lose(self) -> None:  # Dask's client on 'lost-data': computed again later
        self.status = "lost"
        self.computed.clear()

    def compute_again(self) -> None:
        self.status = "finished"
        self.computed.set()

    async def exception(self):
        await self.computed.wait()
        return None


class _GatheringClient:
    """Answers gathers with squares; a gather holding a key in ``stuck`` waits for
    ``release`` (a slow worker, or a dead one Dask keeps trying)."""

    def __init__(self, stuck=()) -> None:
        self.asked, self.cancelled, self.stuck = [], [], set(stuck)
        self.release, self.in_flight, self.most = asyncio.Event(), 0, 0

    async def gather(self, futures):
        self.asked.append([f.key for f in futures])
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.stuck & {f.key for f in futures}:
                await self.release.wait()
            else:
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled.append(True)
            raise
        finally:
            self.in_flight -= 1
        return [int(f.key) ** 2 for f in futures]


async def _until(condition, what: str, seconds: float = 5.0) -> None:
    async def poll():
        while not condition():
            await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(poll(), seconds)
    except (asyncio.TimeoutError, TimeoutError):
        raise AssertionError(f"not within {seconds} s: {what}") from None


async def _turns(n: int) -> None:
    """Let the loop run ``n`` rounds: what was going to happen at once has happened."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_worker_leaving_mid_gather_asks_again_and_never_cancels_dasks_gather():
    """The crash test hung in CI: a worker left while the client gathered results, the
    gather was cancelled to be asked again, and a Dask gather cancelled before its turn
    breaks every later gather of its client (test_dask_seams pins that): no result was
    ever delivered again.  Now the old gather is left to end on its own, and the
    batch's result that was lost is asked for again once Dask computed it anew."""
    from hpcfutures._facade.core.completions import Completions

    client = _GatheringClient(stuck={"1"})
    completions = Completions(client, engine_stub())
    futures = [TaskFuture() for _ in range(3)]
    lost = _DaskFuture("1")

    async def scenario():
        completions.follow(lost, futures[0])
        await _until(lambda: client.asked, "the first gather")
        lost.lose()  # its worker died holding it
        completions.worker_left()
        completions.follow(_DaskFuture("2"), futures[1])
        completions.follow(_DaskFuture("3"), futures[2])
        await _until(lambda: futures[1].done() and futures[2].done(), "the later results")
        client.stuck.clear()
        lost.compute_again()
        await _until(futures[0].done, "the lost result, computed again")
        client.release.set()  # the old gather ends at last: nothing breaks
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert [f.result(timeout=0) for f in futures] == [1, 4, 9]
    assert client.cancelled == [] and ["1"] in client.asked[1:]


def test_a_slow_batch_holds_back_only_itself(monkeypatch):
    """Several batches are fetched at once: results that finish while one gather waits
    on a slow worker are delivered, not queued behind it (one gather at a time did)."""
    from hpcfutures._facade.core import completions as module
    from hpcfutures._facade.core.completions import Completions

    monkeypatch.setattr(module, "SLOW_GATHER", 0.05)

    client = _GatheringClient(stuck={"1"})
    completions = Completions(client, engine_stub())
    futures = [TaskFuture() for _ in range(4)]

    async def scenario():
        completions.follow(_DaskFuture("1"), futures[0])
        await _until(lambda: client.asked, "the slow gather")
        for n in (2, 3, 4):
            completions.follow(_DaskFuture(str(n)), futures[n - 1])
        await _until(lambda: all(f.done() for f in futures[1:]), "the results after the slow one")
        assert not futures[0].done()
        client.release.set()
        await _until(futures[0].done, "the slow result")

    asyncio.run(scenario())
    assert [f.result(timeout=0) for f in futures] == [1, 4, 9, 16]


def test_a_worker_leaving_disturbs_only_batches_that_held_its_results():
    """A wave of departures (an idle release) whose workers held none of the results
    being fetched asks for nothing again: each result is gathered once (every leave
    restarted the gather in progress before, thousands of times in a wave)."""
    from hpcfutures._facade.core.completions import Completions

    client = _GatheringClient(stuck={"1"})
    completions = Completions(client, engine_stub())
    future = TaskFuture()

    async def scenario():
        completions.follow(_DaskFuture("1"), future)
        await _until(lambda: client.asked, "the gather")
        for _ in range(1000):
            completions.worker_left()
        await _turns(50)
        client.release.set()
        await _until(future.done, "the result")

    asyncio.run(scenario())
    assert future.result(timeout=0) == 1 and client.asked == [["1"]]


def test_results_finishing_during_a_gather_wait_for_it_and_go_out_together(monkeypatch):
    """A gather under way and not slow yet: what finishes meanwhile is one batch after
    it (gathers side by side from the start cost a large launch a fifth of its
    throughput: more, smaller gathers)."""
    from hpcfutures._facade.core import completions as module

    monkeypatch.setattr(module, "SLOW_GATHER", 60.0)
    client = _GatheringClient(stuck={"1"})
    completions = module.Completions(client, engine_stub())
    futures = [TaskFuture() for _ in range(4)]

    async def scenario():
        completions.follow(_DaskFuture("1"), futures[0])
        await _until(lambda: client.asked, "the first gather")
        for n in (2, 3, 4):
            completions.follow(_DaskFuture(str(n)), futures[n - 1])
        await _turns(50)
        assert client.asked == [["1"]]
        client.release.set()
        await _until(lambda: all(f.done() for f in futures), "every result")

    asyncio.run(scenario())
    assert client.asked == [["1"], ["2", "3", "4"]]


def test_batches_in_flight_are_bounded(monkeypatch):
    """At most GATHERS batches are fetched at once; what finishes meanwhile waits and
    goes out together (Dask's client runs five gathers at a time)."""
    from hpcfutures._facade.core import completions as module
    from hpcfutures._facade.core.completions import GATHERS, Completions

    monkeypatch.setattr(module, "SLOW_GATHER", 0.0)  # each gather under way counts as slow

    stuck = {str(n) for n in range(1, GATHERS + 1)}
    client = _GatheringClient(stuck=stuck)
    completions = Completions(client, engine_stub())
    futures = [TaskFuture() for _ in range(GATHERS + 10)]

    async def scenario():
        for n in range(1, GATHERS + 1):
            completions.follow(_DaskFuture(str(n)), futures[n - 1])
            await _until(lambda n=n: len(client.asked) == n, f"gather {n}")
        for n in range(GATHERS + 1, GATHERS + 11):
            completions.follow(_DaskFuture(str(n)), futures[n - 1])
        await _turns(50)
        assert completions.fetching == GATHERS and len(client.asked) == GATHERS
        client.release.set()
        await _until(lambda: all(f.done() for f in futures), "every result")

    asyncio.run(scenario())
    assert client.most == GATHERS
    assert [f.result(timeout=0) for f in futures] == [n * n for n in range(1, GATHERS + 11)]
    assert len(client.asked) == GATHERS + 1  # the ten that waited went out as one batch


# ---------------------------------------------------------------- end to end
#: Three workers: two crash, one is left to show that the executor still works.
WORKERS = {"laptop": 3, "run": 5, "srun": 5, "mpiexec": 5}


#: Each way of dying on the laptop; one of them under each launcher.  How a worker
#: died is read by its watcher, the same under every launcher; what differs per
#: launcher is how the launch ends, which any of the three exercises.
DEATHS = [("laptop", "exit"), ("laptop", "segv"), ("laptop", "abort"), ("run", "exit"),
          ("srun", "segv"), ("mpiexec", "abort")]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("launcher", "mode"), DEATHS, indirect=["launcher"])
def test_a_call_that_kills_its_worker_fails_alone_within_seconds(launcher, mode, launches):
    env = {"HPCFUTURES_MAX_WORKERS": "3"} if launcher == "laptop" else {}
    launch = launches(launcher, WORKERS[launcher], "crash_job.py", mode, env=env)
    line = launch.out.wait_for("CRASH SEEN", 120)
    seconds = float(untagged(line).split()[3])
    record_failure_time(f"a call ends its worker ({mode}): WorkerCrashError on its future",
                        launcher, seconds)
    launch.out.wait_for("MAP CRASH SEEN", 60)
    launch.out.wait_for("STILL USABLE", 60)
    code = launch.finish(60)
    errors = launch.err.rest()
    how = {"exit": "exited with status 3", "segv": "was killed by SIGSEGV",
           "abort": "was killed by SIGABRT"}[mode]
    assert f"{how} running __main__.crash " in errors, launch  # the watcher, in the log
    if launcher in ("laptop", "run"):
        assert code == 0, launch  # the client's status: it was told, and carried on
    else:
        # A rank died: srun and mpiexec report its status (its process is gone).
        assert code != 0, launch
    if launcher == "run":  # its last line names the rank and the call
        verdict = [line for line in errors.splitlines() if line.startswith("hpcfutures run:")]
        assert verdict and "(worker) was killed by a call" in verdict[-1], launch
        assert f"{how} running __main__.crash " in verdict[-1], launch
    if launcher == "mpiexec":  # the client ends the job with the dead rank's status
        assert "a call killed a worker rank" in errors, launch


@pytest.mark.timeout(180)
def test_when_every_worker_ran_a_crashing_call_the_executor_breaks_within_seconds(
        launcher, launches):
    env = {"HPCFUTURES_MAX_WORKERS": str(LAPTOP_WORKERS)} if launcher == "laptop" else {}
    launch = launches(launcher, 4, "crash_job.py", "exit", "all", env=env)
    line = launch.out.wait_for("BROKEN SEEN", 120)
    seconds = float(untagged(line).split()[3])
    record_failure_time("every worker ran a crashing call: BrokenHPCExecutor", launcher,
                        seconds)
    # srun and mpiexec report the dead ranks' statuses; the others follow the client.
    code = launch.finish(60)
    assert (code == 0) == (launcher in ("laptop", "run")), launch


@pytest.mark.timeout(120)
def test_a_local_worker_killed_from_outside_mid_map_loses_no_result(launches):
    launch = launches("laptop", 1, "map_job.py", env={"HPCFUTURES_MAX_WORKERS": "2"})
    launch.out.wait_for("READY", 90)
    workers = wait_until(lambda: [pid for pid in launch.ranks()
                                  if pid != launch.process.pid and _is_worker(pid)],
                         30, "a local worker process")
    killed_at = time.monotonic()
    os.kill(workers[0], signal.SIGKILL)
    launch.out.wait_for("RESULTS OK", 60)
    record_failure_time("worker SIGKILLed mid-map: all results (map end)", "laptop",
                        time.monotonic() - killed_at)
    assert launch.finish(30) == 0, launch


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"hpcfutures._launch.worker_process" in cmdline.read()
    except OSError:
        return False



def test_the_crash_error_says_which_call_it_was():
    """For a map, the item's position; for a submitted call, its arguments; a call lost
    too often names its map items."""
    chunk = [(i,) for i in range(10)]
    placed = TaskFuture()
    placed._call.places = range(20, 30)
    first, _, _, _ = recover((run_chunk_task, abs, (chunk,), {}, False), culprit_at(0),
                             future=placed)
    assert "job.f (map item 20) crashed its worker" in str(first.exception(0))
    placed = TaskFuture()
    placed._call.places = [3, 7, 8, 9, 12, 13, 14, 15, 16, 17]  # a resumed map: the journal had 4-6
    _, resent, _, _ = recover((run_chunk_task, abs, (chunk,), {}, False), culprit_at(1),
                              future=placed)
    (_, (_, _, _, kwargs, _)), = resent
    assert "(map item 7)" in str(kwargs["then"])
    alone, _, _, _ = recover((run_task, abs, (-7,), {"big": "x" * 200}, False), culprit_at(0))
    text = str(alone.exception(0))
    assert "job.f (call abs(-7, big='xxxxxxxxxxx" in text and "x" * 40 not in text
    calls = [(abs, (i,), {}) for i in range(3)]
    _, resent, _, _ = recover((run_bundle, None, (calls,), {}, False), culprit_at(1))
    (_, (_, _, (again,), _, _)), = resent
    assert "(call abs(1))" in str(again[1][1][0])
    lost = TaskFuture()
    lost._call.places, lost._call.losses = range(20, 30), MAX_LOSSES
    recover((run_chunk_task, abs, (chunk,), {}, False), None, future=lost)
    assert "(map items 20-29) was running on a worker that was lost" in str(lost.exception(0))


@pytest.mark.parametrize("report", ["Fatal Python error: Segmentation fault", ""])
def test_a_crash_errors_sentences_each_start_with_a_capital_and_it_ends_with_a_full_stop(
        report):
    """Found by a user's eye: "... on rank 3. its output may say more" (issue 29)."""
    import re

    from hpcfutures._facade.core.recovery import crash_error

    certificate = {"culprit": {"function": "job.f", "key": "k", "index": 0}, "how": "signal",
                   "signal": "SIGSEGV", "who": "rank 3 (worker) on node17", "report": report}
    text = str(crash_error(certificate, "map item 2"))
    sentences = re.split(r"(?<=[.;]) (?=[A-Za-z])", text.split(": ", 1)[1])
    starts = [s[0] for s in sentences if not s.startswith(("to debug", "the others"))]
    assert all(c.isupper() for c in starts[1:]), sentences
    assert text.endswith(".") and "job.f (map item 2) crashed its worker" in text
