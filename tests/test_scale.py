"""What a launch of thousands of ranks needs from each rank, and the scale harness's smoke run.

The figures themselves come from ``benchmarks/scale.py`` (up to 2,000 worker
ranks); these tests pin each behaviour that the harness showed a large launch
needs, at a size a unit test can afford, and run the harness once, small.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
import time
import types
from types import SimpleNamespace

import pytest
from helpers import ROOT, engine_stub, run_job
from pace import scaled

from hpcfutures import StartupTimeoutError
from hpcfutures._support.patience import Patience, shared_file_poll
from hpcfutures.launchers import SchedulerInfo
from hpcfutures.launchers._schedfile import SchedulerFileExchange


def test_a_process_builds_each_tls_context_once():
    """Dask builds a fresh SSLContext per connection (~2 ms of CPU, and temporary
    files); a rank knocks and probes many times, a hosting process for each rank."""
    from hpcfutures._dask import make_security
    from hpcfutures._support.security import new_credentials

    credentials = new_credentials()
    security = make_security(credentials)
    assert make_security(dict(credentials)) is security
    first = security.get_connection_args("client")["ssl_context"]
    assert security.get_connection_args("client")["ssl_context"] is first
    assert security.get_listen_args("worker")["ssl_context"] is \
        security.get_listen_args("worker")["ssl_context"]


class _Silent:
    """A stand-in for hpcfutures._dask whose scheduler stays silent ``times`` knocks."""

    def __init__(self, times: int, port_open: bool = False) -> None:
        from hpcfutures._dask import Knock

        self.Knock, self.times, self.knocks = Knock, times, 0
        self.port_open = port_open

    def make_security(self, credentials):
        return None

    async def knock(self, address, timeout, security=None):
        self.knocks += 1
        return self.Knock.SILENT if self.knocks <= self.times else self.Knock.ANSWERED

    async def listening(self, address, timeout):
        return self.Knock.ANSWERED if self.port_open else self.Knock.SILENT


class _OneAnswer:
    """An exchange that always has the same answer (as an MPI broadcast has)."""

    description = "a test exchange"
    silence_means_finished = True

    def __init__(self) -> None:
        self.info = SchedulerInfo(address="tls://127.0.0.1:1", launch_id="x", nonce="n")
        self.stale: list[object] = []

    async def lookup_async(self, timeout, stale=None):
        self.stale.append(stale)
        return self.info


def test_a_silent_scheduler_is_asked_again_not_taken_for_stale_or_finished():
    """At the start of a large launch one scheduler answers thousands of probes a
    TLS handshake at a time: silence is not death.  (It was: three silent probes
    made a worker under MPI leave with status 0, and made any rank reject the
    live scheduler file.)"""
    from hpcfutures._launch.lookup import find_scheduler

    fake, exchange = _Silent(times=5), _OneAnswer()
    info = asyncio.run(find_scheduler(fake, exchange, timeout=30, may_be_late=True))
    assert info is exchange.info and fake.knocks == 6
    assert exchange.stale == [None] * 6, "a silent scheduler's answer was marked stale"


def test_the_spread_and_a_busy_scheduler_do_not_count_against_the_timeout(monkeypatch):
    """At 2,000 ranks a worker waits a random part of 10 s before its probe, then meets
    a scheduler busy with the others' joins: ranks ran out of ``timeout`` at a live
    scheduler, and the launch never had all its workers."""
    import random

    from hpcfutures._launch import lookup

    class Slow(_Silent):
        async def knock(self, address, timeout, security=None):
            await asyncio.sleep(0.05)
            return await super().knock(address, timeout, security)

    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # the longest spread
    patience = Patience.for_launch(80, 0.5)  # a herd of 0.4 s
    assert patience.herd == pytest.approx(0.4)
    fake, exchange = Slow(times=2), _OneAnswer()
    info = asyncio.run(lookup.find_scheduler(fake, exchange, timeout=0.5, may_be_late=True,
                                             patience=patience, spread=True))
    assert info is exchange.info and fake.knocks == 3


@pytest.mark.parametrize("port_open", [True, False])
def test_a_scheduler_whose_port_accepts_but_that_stays_silent_gets_the_timeout_once_more(
        port_open):
    """Seen at 2,000 ranks on 2 cores: the scheduler took 35-65 s to hear every rank,
    and a rank whose 60 s ran out while its probes met a scheduler busy with the
    others' joins left the launch one worker short.  A port that accepts connections
    (the kernel answers, however busy the scheduler) earns ``timeout`` once more;
    silence on a port that does not accept does not, and neither waits for ever."""
    from hpcfutures._launch.lookup import find_scheduler

    class Slow(_Silent):
        async def knock(self, address, timeout, security=None):
            await asyncio.sleep(0.05)
            return await super().knock(address, timeout, security)

    timeout = 0.6
    fake, exchange = Slow(times=10**6, port_open=port_open), _OneAnswer()
    started = time.monotonic()
    with pytest.raises(StartupTimeoutError, match="did not answer") as caught:
        asyncio.run(find_scheduler(fake, exchange, timeout=timeout, may_be_late=True,
                                   patience=Patience.for_launch(2, timeout)))
    waited = time.monotonic() - started
    if port_open:
        assert 2 * timeout <= waited < 2 * timeout + 1.5, waited
        assert "within 1.2 s" in str(caught.value)
    else:
        assert timeout <= waited < 2 * timeout, waited


def test_a_joining_worker_waits_out_a_silent_scheduler():
    """Silent knocks while the join is pending (the scheduler is busy with other
    joins) neither end the join nor the rank; the join completes."""
    from hpcfutures._launch.worker_side import _join_while_launch_lasts

    class Service:
        async def join(self):
            await asyncio.sleep(0.3)

        async def close(self, reason):
            raise AssertionError(f"the join was abandoned: {reason}")

    class Exchange:
        silence_means_finished = True

        def is_finished(self, info):
            return False

    knocks = []

    async def silent():
        knocks.append(1)
        return False

    joined = asyncio.run(_join_while_launch_lasts(Service(), Exchange(), None, asyncio.Event(),
                                                  silent, check_every=0.02))
    assert joined and len(knocks) >= 3, knocks


def test_a_worker_that_joined_as_the_launch_ended_is_done_not_failed():
    """A worker that registered while the scheduler closed (the client finished a
    short map before all 150 ranks had joined) loses its connection without a
    verdict; the end mark the scheduler writes after its close makes that an
    exit of 0.  A scheduler that vanished without one is still a failure."""
    from hpcfutures._launch.worker_side import _launch_ended

    class Exchange:
        silence_means_finished = False

        def __init__(self, finished_after):
            self.finished_at = time.monotonic() + finished_after

        def is_finished(self, info):
            return time.monotonic() >= self.finished_at

    async def refused():
        return None

    async def answering():
        return True

    assert asyncio.run(_launch_ended(Exchange(0.3), None, refused, 2.0, every=0.02))
    started = time.monotonic()
    assert not asyncio.run(_launch_ended(Exchange(60), None, refused, 0.3, every=0.02))
    assert time.monotonic() - started < scaled(2.0)
    # MPI: the launcher ends every rank when one dies, so a closed port is the end;
    # a scheduler that still answers dropped this worker.
    mpi = Exchange(60)
    mpi.silence_means_finished = True
    assert asyncio.run(_launch_ended(mpi, None, refused, 2.0, every=0.02))
    assert not asyncio.run(_launch_ended(mpi, None, answering, 2.0, every=0.02))


def test_checks_while_joining_grow_with_the_launch():
    small, large = Patience.for_launch(4, 60), Patience.for_launch(2000, 60)
    assert small.knock_every == 0.25
    assert large.knock_every >= 1.0
    assert large.probe_timeout > small.probe_timeout and large.probe_timeout <= 60
    assert Patience.for_launch(100_000, 60).probe_timeout == 60  # never past the deadline


def test_a_waiting_rank_reads_the_scheduler_file_at_most_once_a_second_after_10_s(
        tmp_path, monkeypatch):
    """10,000 ranks reading a file on a shared filesystem ten times a second put
    100,000 metadata operations a second on one server.  Driven by a fake clock:
    60 s of waiting for a file that never comes."""
    from hpcfutures.launchers import _schedfile

    clock = [0.0]
    monkeypatch.setattr(_schedfile.time, "monotonic", lambda: clock[0])
    reads: list[float] = []
    exchange = SchedulerFileExchange(tmp_path / "never.json", "launch", rank=7)
    monkeypatch.setattr(exchange, "_read_quietly", lambda: reads.append(clock[0]))
    looking = exchange._looking(60.0, None)
    with pytest.raises(Exception, match="waited 60 s"):
        for pause in looking:
            clock[0] += pause
    assert len([t for t in reads if t < 2]) >= 10, "the first look-ups are no longer quick"
    late = [t for t in reads if 10 <= t < 59]  # (the last look is at the deadline)
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(late)), late
    assert all(shared_file_poll(w) >= 1.0 for w in (10.0, 30.0, 3600.0))


def test_a_wave_of_departures_is_one_line_on_the_client(caplog):
    """200 workers lost with their node: one warning naming a few, not 200."""
    from hpcfutures._dask import WorkerChanges
    from hpcfutures._facade.core.roster import WorkerRoster

    changes = WorkerChanges()

    asked: list[int] = []

    class Scheduler:
        async def hpcfutures_worker_changes(self, start):
            asked.append(start)
            return changes.since(start)

    client = types.SimpleNamespace(scheduler=Scheduler())
    roster = WorkerRoster()
    roster.pointer = lambda name: (f"rank {name[5:]} (worker)", "see its output")
    changes.events += [("+", f"w{n}", f"rank-{n}", "node1" if n < 202 else "node2")
                       for n in range(2, 2002)]
    asyncio.run(roster.refresh(client, lambda: False))
    for n in range(2, 202):
        changes.left(f"w{n}")
    with caplog.at_level(logging.WARNING, logger="hpcfutures"):
        asyncio.run(roster.refresh(client, lambda: False))
    lines = [r.getMessage() for r in caplog.records if "left the launch" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("200 workers left the launch at once") and "node1" in lines[0]
    assert len(roster.lost) == 200 and len(roster.seen) == 1800
    assert asked == [0, 2000], "the roster asked for more than what changed"


@pytest.mark.timeout(90)
def test_the_scale_harness_runs_small_and_prints_its_table(tmp_path):
    """``benchmarks/scale.py --quick``: 16 worker ranks on 4 hosting processes, one
    of them killed mid-map, beside Dask's own; every figure printed."""
    out = tmp_path / "scale.json"
    job = run_job([sys.executable, ROOT / "benchmarks" / "scale.py", "--quick", "--json", out],
                  timeout=80)
    assert job.returncode == 0, job
    data = json.loads(out.read_text())
    assert {r["side"] for r in data["results"]} == {"hpcfutures", "dask"}
    for result in data["results"]:
        assert "error" not in result, result
        assert result["wrong"] == 0 and set(result["outcomes"]) == {"exit 0"}, result
        assert result["client_status"] == 0 and result["scheduler_status"] == 0, result
        assert result["warm_map"] > 0 and result["after_kill"] > 0, result
        assert set(result["throughput"]) == {"20x0.02", "100x0.002"}, result
    ours = next(r for r in data["results"] if r["side"] == "hpcfutures")
    # the killed host's stand-in watchers certified each of its 4 workers' deaths
    assert ours["certified"] == 4, ours
    for row in ("ready after the scheduler file appeared", "scheduler CPU per join",
                "scheduler descriptors", "scheduler-file reads", "nothing lost",
                "map done after killing", "map of 100 N calls of 0.002 s",
                "its Dask tasks a second", "shutdown"):
        assert row in job.stdout, job


def test_the_scale_table_keeps_what_a_side_measured_before_it_failed():
    """Dask's side stalled after its timed maps at 1,000 workers: its row used to say
    "failed" everywhere, its finished maps' figures lost.  Only what was never measured
    says "failed" now."""
    from benchmarks.scale import table

    stalled = {"side": "dask", "workers": 8, "error": "the client ended or stalled",
               "ready": 2.5, "warm_map": 1.5,
               "throughput": {"20x0.5": {"seconds": 101.0, "ideal": 10.0,
                                         "tasks_per_second": 198.0, "given_up": True}}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in
            table([stalled], None).splitlines()[2:]}
    assert "| — / 2.5 |" in rows["ready after the scheduler file appeared, s"]
    assert "| — / 1.5 |" in rows["map of 2 N calls, nothing lost (the first map), s"]
    assert "given up at 101 (10 x)" in rows["map of 20 N calls of 0.5 s, s (x the ideal)"]
    assert "failed" in rows["every result right"]
    assert "failed" in rows["map done after killing 10 % of the workers (the second), s"]


def test_a_result_lost_with_its_worker_before_it_was_fetched_runs_again():
    """Found by the harness at 500 workers: a finished result whose worker died in
    a wave before the client fetched it came back from the one-by-one gather as
    Dask's KilledWorker and failed the user's map, where a task lost while
    running is sent again (recovery.py)."""
    from distributed.scheduler import KilledWorker

    from hpcfutures._facade.core.completions import Completions
    from hpcfutures._facade.core.futures import TaskFuture

    class Client:
        async def gather(self, what):
            raise KilledWorker("hpcf-1-work-0", types.SimpleNamespace(address="tls://w"), 0)

    taken = []
    completions = Completions(Client(), engine_stub(recovery=SimpleNamespace(
        lost=lambda dask_future, future, exc: taken.append(exc) or True)))
    future = TaskFuture()
    asyncio.run(completions._gather_one_by_one([(object(), future)]))
    assert not future.done() and isinstance(taken[0], KilledWorker)


def test_a_result_lost_before_it_was_looked_at_is_awaited_again_not_a_lost_scheduler():
    """Found by the harness at 250 workers with 10 % killed: a task finished, and its
    result was lost with its worker before the client's watch looked at it; Dask
    said "lost", and the executor took that for a lost scheduler and broke."""
    from hpcfutures._facade.core.completions import Completions
    from hpcfutures._facade.core.futures import TaskFuture

    class DaskFuture:
        key = "hpcf-1-work-0"
        status = "lost"

        def __init__(self):
            self.statuses = ["lost", "lost", "finished"]

        async def exception(self):
            self.status = self.statuses.pop(0) if self.statuses else "finished"

    gathered = []

    class Client:
        async def gather(self, futures):
            gathered.extend(futures)
            return [4 for _ in futures]

    broke: list[bool] = []
    started: list[asyncio.Future] = []

    def in_background(awaitable):
        started.append(asyncio.ensure_future(awaitable))
        return started[-1]

    completions = Completions(Client(), engine_stub(connection_lost=lambda: broke.append(True),
                                                    in_background=in_background))
    future = TaskFuture()

    async def scenario():
        completions.follow(DaskFuture(), future)
        while running := [task for task in started if not task.done()]:
            await asyncio.gather(*running)

    asyncio.run(scenario())
    assert not broke and future.result(timeout=1) == 4


def test_a_handshake_its_peer_gave_up_prints_no_traceback(caplog):
    """A busy scheduler accepts probes whose senders already gave up: tornado and Dask
    printed a traceback for each (dozens in a 150-rank start-up, one at every end)."""
    import ssl

    from hpcfutures._support.logs import quiet_dask_logging

    quiet_dask_logging({})

    def report(logger: str, error: BaseException) -> None:
        try:
            raise error
        except BaseException:
            logging.getLogger(logger).error("Exception in callback ...", exc_info=True)

    def closed_early() -> BaseException:
        try:
            raise OSError(107, "Transport endpoint is not connected")
        except OSError:
            try:
                raise ssl.SSLError("Closed before TLS handshake with data in recv buffer.")
            except ssl.SSLError as err:
                return err

    with caplog.at_level(logging.ERROR):
        report("asyncio", closed_early())
        report("tornado.application", ValueError("invalid operation on non-started TCPListener"))
        report("tornado.application", ValueError("something else"))
    assert [r.exc_info[1].args[0] for r in caplog.records] == ["something else"]


def test_a_joining_workers_check_is_a_tcp_connection_the_scheduler_takes_quietly(caplog):
    """While its join is pending a worker asks whether the scheduler's port still
    listens: a TCP connection, not a TLS handshake (~2 ms of the scheduler's CPU
    each, times every pending join), which the scheduler drops without a word."""
    from helpers import closed_port

    from hpcfutures import _dask
    from hpcfutures._support.logs import quiet_dask_logging
    from hpcfutures._support.security import new_credentials

    quiet_dask_logging({})

    async def scenario() -> None:
        security = _dask.make_security(new_credentials())
        service = await _dask.SchedulerService(host="127.0.0.1", interface=None,
                                               security=security).start()
        try:
            with caplog.at_level(logging.INFO):
                knocks = [await _dask.listening(service.address, 5) for _ in range(20)]
                # A TLS handshake after them: the scheduler's loop has taken those
                # connections (and said whatever it had to say) by its end.
                assert await _dask.probe(service.address, 5, security)
            assert set(knocks) == {_dask.Knock.ANSWERED}
        finally:
            await service.close()
        closed = await _dask.listening(f"tls://127.0.0.1:{closed_port()}", 5)
        assert closed is _dask.Knock.REFUSED

    asyncio.run(asyncio.wait_for(scenario(), 60))
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], [r.getMessage() for r in noisy]


def test_a_large_launchs_watchers_have_longer_to_hand_in_a_certificate(monkeypatch):
    """A wave of deaths queues hundreds of watchers' reports at one scheduler: each
    watcher is told the launch's report timeout, grown with its size, not a fixed 5 s."""
    from hpcfutures._dask import worker as worker_module
    from hpcfutures._remote import deathwatch
    from hpcfutures._support.patience import Patience

    handed: list[dict] = []
    monkeypatch.setattr(deathwatch, "start_watcher",
                        lambda report, keep_fds=(): handed.append(report) or True)
    monkeypatch.setattr(deathwatch, "set_key_source", lambda source: None)
    patience = Patience.for_launch(2002, 60.0)
    service = worker_module.WorkerService.__new__(worker_module.WorkerService)
    service.address, service._security = "tls://10.0.0.1:8786", None
    service._report_timeout = patience.report_timeout
    service._worker = types.SimpleNamespace(address="tls://10.0.0.2:4000")
    service._watch()
    (report,) = handed
    assert report["report_timeout"] == patience.report_timeout > worker_module.REPORT_TIMEOUT
    assert report["worker"] == "tls://10.0.0.2:4000"


def test_settling_a_future_settled_already_logs_nothing(caplog):
    """At 1,000 workers with 100 killed, the client logged 72 CRITICAL "Future ... in
    unexpected state: FINISHED" lines: a result was settled twice (gathered, then its
    task reported lost in the wave); the second settle is a no-op, and silent."""
    from hpcfutures._facade.core.futures import TaskFuture, mark_running, settle

    future = TaskFuture()
    settle(future, result=1)
    with caplog.at_level("DEBUG"):
        settle(future, result=2)
        settle(future, exception=RuntimeError("lost"))
        mark_running(future)
    assert future.result() == 1
    assert not caplog.records, [r.getMessage() for r in caplog.records]
