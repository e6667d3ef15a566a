"""The scheduler's bookkeeping per event, at the scale of thousands of workers.

Issue 30 ("At scale (1 of 2)"): the cluster-size announcement, the MPI grants'
free set and the death-certificate waits all did O(workers) work on every join,
leave or certificate, and a wave of deaths logged one line per worker.  These
tests drive the Coordinator (and its Deaths and RankGroups) with stand-ins for
Dask's scheduler and WorkerState, and count what each event costs: each of them
fails on the code before the fix.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pace import scaled

from hpcfutures._dask._common import CLUSTER_TOPIC, STARTUP_TOPIC, WORKER_TOPIC
from hpcfutures._dask.coordinator import Coordinator
from hpcfutures._dask.deaths import Deaths
from hpcfutures._support import waves


# ---------------------------------------------------------------- stand-ins
class _Status(enum.Enum):
    init = "init"
    running = "running"
    closed = "closed"


class FakeWorker:
    """What the Coordinator reads of Dask's WorkerState."""

    def __init__(self, address: str, name: str, nthreads: int = 1) -> None:
        self.address, self.name, self.nthreads = address, name, nthreads
        self.host = address.split("://")[-1].rsplit(":", 1)[0]
        self.status = _Status.running
        self.processing: set[Any] = set()


class Workers(dict):
    """``Scheduler.workers`` that refuses to be walked once ``armed``: a look-up
    by address is O(1), a walk over every worker is what each event must not do."""

    armed = False

    def _refuse(self) -> None:
        if self.armed:
            raise AssertionError("an event walked over every worker")

    def __iter__(self) -> Iterator[str]:
        self._refuse()
        return super().__iter__()

    def items(self):  # type: ignore[override]
        self._refuse()
        return super().items()

    def values(self):  # type: ignore[override]
        self._refuse()
        return super().values()

    def keys(self):  # type: ignore[override]
        self._refuse()
        return super().keys()


class FakeScheduler:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.stream_handlers: dict[str, Any] = {}
        self.client_comms: dict[str, Any] = {}
        self.stream_comms: dict[str, Any] = {}
        self.workers = Workers()
        self.idle: dict[str, Any] = {}
        self.idle_task_count: set[Any] = set()
        self.events: list[tuple[str, dict[str, Any]]] = []

    def log_event(self, topic: str, msg: dict[str, Any]) -> None:
        self.events.append((topic, msg))

    def check_idle_saturated(self, ws: FakeWorker) -> None:
        """Dask files a worker as idle again (a released MPI rank)."""
        self.idle[ws.address] = ws

    def cluster_events(self) -> list[tuple[int, int]]:
        return [(m["workers"], m["threads"]) for t, m in self.events if t == CLUSTER_TOPIC]

    def join(self, coordinator: Coordinator, address: str, name: str, threads: int = 1,
             description: dict[str, Any] | None = None) -> None:
        """As Dask's add_worker: listed first, then the plug-ins told; then, as the
        worker's first message, the event that describes it (``description``)."""
        self.workers[address] = FakeWorker(address, name, threads)
        coordinator.add_worker(self, address)
        if description is not None:
            coordinator.log_event(WORKER_TOPIC, {"name": name, **description,
                                                 "worker": address})

    def leave(self, coordinator: Coordinator, address: str, listed: bool = False) -> None:
        """As Dask's remove_worker: the plug-ins told after it is dropped (``listed``:
        while it is still listed, as older Dask releases did)."""
        if listed:
            coordinator.remove_worker(self, address)
            del self.workers[address]
        else:
            del self.workers[address]
            coordinator.remove_worker(self, address)


async def started(expected_workers: int | None = None,
                  walks: bool = True) -> tuple[Coordinator, FakeScheduler]:
    """A Coordinator on a stand-in scheduler; ``walks=False``: a walk over every
    worker fails the test (for the tests of the events that must not walk)."""
    coordinator = Coordinator(expected_workers=expected_workers)
    scheduler = FakeScheduler()
    await coordinator.start(scheduler)  # type: ignore[arg-type]
    scheduler.workers.armed = not walks
    return coordinator, scheduler


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts what it is asked to run next: every task's step
    and every future's callback (a waiter woken) goes through call_soon."""

    calls = 0

    def call_soon(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.calls += 1
        return super().call_soon(*args, **kwargs)


def on_counting_loop(scenario: Any) -> int:
    loop = CountingLoop()
    try:
        loop.run_until_complete(scenario())
        return loop.calls
    finally:
        loop.close()


def certificate(worker: str, signal: str = "SIGSEGV", rank: int = 0) -> dict[str, Any]:
    return {"worker": worker, "who": f"rank {rank} (worker) on node{rank // 100}",
            "how": "signal", "signal": signal, "status": None, "culprit": None,
            "running": [], "report": ""}


class Lines(logging.Handler):
    """The hpcfutures logger's records (it may not propagate: see _support/logs.py)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    ours = logging.getLogger("hpcfutures")
    ours.addHandler(handler)
    yield handler
    ours.removeHandler(handler)


@pytest.fixture(autouse=True)
def no_filter_outlives_its_test() -> Iterator[None]:
    """The stand-in schedulers here are never closed, so their late-heartbeat filters
    would stay on Dask's logger until the garbage collector took their registers
    (whose departed workers have the same made-up addresses from test to test): a
    real scheduler's close takes its filter off; here the fixture does."""
    dask_log = logging.getLogger("distributed.scheduler")
    before = list(dask_log.filters)
    yield
    for added in [f for f in dask_log.filters if f not in before]:
        dask_log.removeFilter(added)


@pytest.fixture
def short_waves(monkeypatch: pytest.MonkeyPatch) -> float:
    """A wave window of 0.2 s instead of 1 s, for the logs' tests."""
    monkeypatch.setattr(waves, "WAVE_WINDOW", 0.2)
    return 0.2


# ---------------------------------------------------- the cluster announcement
def test_joins_and_leaves_are_announced_from_running_totals_once_per_burst():
    async def scenario() -> None:
        coordinator, scheduler = await started(walks=False)
        for i in range(100):  # a herd registering within one turn of the loop
            scheduler.join(coordinator, f"tls://10.0.0.{i}:1", f"rank-{i + 2}", threads=2)
        await asyncio.sleep(0)
        assert scheduler.cluster_events() == [(100, 200)], "one announcement per burst"
        scheduler.join(coordinator, "tls://10.0.1.0:1", "rank-200", threads=4)
        await asyncio.sleep(0)
        assert scheduler.cluster_events()[-1] == (101, 204), "a lone join, at once"
        # the announced count leaves out the leaving worker, however Dask orders it
        scheduler.leave(coordinator, "tls://10.0.1.0:1", listed=True)
        await asyncio.sleep(0)
        assert scheduler.cluster_events()[-1] == (100, 200)
        for i in range(50):
            scheduler.leave(coordinator, f"tls://10.0.0.{i}:1")
        await asyncio.sleep(0)
        assert scheduler.cluster_events()[-1] == (50, 100)
        assert len(scheduler.cluster_events()) == 4
        scheduler.leave(coordinator, "tls://10.0.0.60:1")
        scheduler.join(coordinator, "tls://10.0.2.0:1", "rank-300", threads=3)
        await asyncio.sleep(0)
        assert scheduler.cluster_events()[-1] == (50, 101)

    asyncio.run(scenario())


def test_without_a_running_loop_each_change_is_announced_at_once():
    async def start() -> tuple[Coordinator, FakeScheduler]:
        return await started(walks=False)

    coordinator, scheduler = asyncio.run(start())
    scheduler.join(coordinator, "tls://a:1", "rank-2", threads=2)
    scheduler.join(coordinator, "tls://b:1", "rank-3", threads=1)
    scheduler.leave(coordinator, "tls://a:1")
    assert scheduler.cluster_events() == [(1, 2), (2, 3), (1, 1)]


# ----------------------------------------------------------------- MPI grants
def test_waiting_mpi_grants_list_the_free_ranks_at_most_once_per_event():
    async def scenario() -> None:
        coordinator, scheduler = await started()
        groups = coordinator.groups
        listed = 0
        free = groups._free

        def counted() -> list[str]:
            nonlocal listed
            listed += 1
            return free()

        groups._free = counted  # type: ignore[method-assign]
        scheduler.join(coordinator, "tls://plain:1", "not-an-mpi-rank")
        waiting = [asyncio.ensure_future(groups._reserve(call, ranks, wait=10))
                   for call, ranks in (("big", 20), ("small-1", 2), ("small-2", 2))]
        await asyncio.sleep(0.01)
        for i in range(20):  # too few ranks for the first in line: no listing at all
            scheduler.join(coordinator, f"tls://10.0.0.{i}:1", f"rank-{i + 2}")
            if i == 10:  # ... nor when a rank nobody holds leaves
                scheduler.leave(coordinator, f"tls://10.0.0.{i}:1")
        assert listed == 0 and not any(w.done() for w in waiting), listed
        scheduler.join(coordinator, "tls://10.0.0.99:1", "rank-99")  # the 20th rank
        big = await asyncio.wait_for(waiting[0], 5)
        assert listed == 1 and "tls://plain:1" not in big["workers"]
        assert not waiting[1].done(), "a later call went before the first in line"
        groups._release("big")  # one event that lets both small calls go
        small = await asyncio.wait_for(asyncio.gather(*waiting[1:]), 5)
        assert listed == 2, f"the free ranks were listed {listed - 1} times for one event"
        workers = [address for grant in small for address in grant["workers"]]
        assert len(workers) == 4 == len(set(workers)) and "tls://plain:1" not in workers
        assert [len(grant["world_ranks"]) for grant in small] == [2, 2]
        # a held worker that leaves is forgotten at once, without a walk over them all
        gone = small[0]["workers"][0]
        scheduler.leave(coordinator, gone)
        assert gone not in groups.held and len(groups.held) == 3
        # no call waits: an event lists nothing
        scheduler.join(coordinator, "tls://10.0.0.97:1", "rank-97")
        assert listed == 2

    asyncio.run(scenario())


def test_the_free_ranks_are_usable_unheld_available_and_least_busy_first():
    async def scenario() -> None:
        coordinator, scheduler = await started()
        groups = coordinator.groups
        for i in range(6):
            scheduler.join(coordinator, f"tls://w{i}:1", f"rank-{i + 2}")
        scheduler.workers["tls://w0:1"].status = _Status.closed
        scheduler.workers["tls://w1:1"].processing = {"a", "b"}
        groups.unavailable = lambda: {"tls://w2:1"}
        grant = await groups._reserve("call", 3, wait=1)
        assert grant["workers"][:2] == ["tls://w3:1", "tls://w4:1"] and \
            grant["workers"][2] in {"tls://w5:1", "tls://w1:1"}, grant
        assert grant["world_ranks"] == [int(a[7]) + 2 for a in grant["workers"]]

    asyncio.run(scenario())


# ------------------------------------------------------------------- deaths
def test_each_certificate_wakes_only_the_requests_waiting_for_it():
    deaths = 500

    async def scenario() -> None:
        coordinator, _ = await started()
        waiting = [asyncio.ensure_future(coordinator.deaths.await_certificate(f"w{i}", 30))
                   for i in range(deaths)]
        await asyncio.sleep(0.01)
        for i in range(deaths):  # certificates come one by one, as watchers report
            coordinator.deaths.record(certificate(f"w{i}", rank=i))
            for _ in range(4):
                await asyncio.sleep(0)
        got = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert [c["worker"] for c in got] == [f"w{i}" for i in range(deaths)]

    logging.getLogger("hpcfutures").disabled = True  # 500 lines of no interest here
    try:
        started_at = time.monotonic()
        calls = on_counting_loop(scenario)
        took = time.monotonic() - started_at
    finally:
        logging.getLogger("hpcfutures").disabled = False
    # the scenario's own yields are 4 a certificate; each waiter woken costs a few more
    assert calls < 15 * deaths, f"{calls} callbacks run for {deaths} certificates"
    assert took < scaled(2), took


def test_a_request_that_times_out_leaves_nothing_behind():
    async def scenario() -> None:
        deaths = Deaths()
        assert await deaths.await_certificate("w1", 0.05) is None
        assert await deaths.await_certificate("w1", 0) is None
        assert not deaths._waiters
        late = asyncio.ensure_future(deaths.await_certificate("w2", 5))
        other = asyncio.ensure_future(deaths.await_certificate("w3", 5))
        await asyncio.sleep(0.01)
        logging.getLogger("hpcfutures").disabled = True
        try:
            deaths.record(certificate("w2"))
        finally:
            logging.getLogger("hpcfutures").disabled = False
        assert (await asyncio.wait_for(late, 1))["worker"] == "w2"
        assert not other.done()
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
        assert not deaths._waiters

    asyncio.run(scenario())


def test_a_request_about_a_dead_worker_does_not_walk_the_workers():
    async def scenario() -> None:
        coordinator, scheduler = await started(expected_workers=2)
        scheduler.join(coordinator, "tls://a:1", "rank-2")
        scheduler.join(coordinator, "tls://b:1", "rank-3")
        scheduler.leave(coordinator, "tls://a:1")
        scheduler.workers.armed = True  # the request must not walk the workers
        answer = await coordinator._await_death("tls://a:1", 0)
        assert answer == {"certificate": None, "none_left": None}
        scheduler.workers.armed = False
        scheduler.leave(coordinator, "tls://b:1", listed=True)
        scheduler.workers.armed = True
        answer = await coordinator._await_death("tls://b:1", 0)
        assert answer["none_left"] == (
            "no worker is left, and none can join this launch: "
            "the worker at tls://a:1 was lost; the worker at tls://b:1 was lost")

    asyncio.run(scenario())


def test_no_worker_left_names_a_few_and_counts_the_others_by_cause():
    async def scenario() -> None:
        deaths = Deaths()
        deaths.capacity = 10_000
        logging.getLogger("hpcfutures").disabled = True
        try:
            for i in range(10_000):
                worker = f"tls://10.0.{i // 250}.{i % 250}:40000"
                if i % 1000 == 3:
                    deaths.record(certificate(worker, "SIGKILL", rank=i))
                deaths.departed_worker(worker)
                if i % 2000 == 4:  # a certificate after the departure
                    deaths.record(certificate(worker, "SIGSEGV", rank=i))
        finally:
            logging.getLogger("hpcfutures").disabled = False
        assert deaths.none_left(0, 10_000, 0)
        message = await deaths.why_none_left(0)
        assert len(message) < 1000, len(message)
        assert message.startswith("no worker is left, and none can join this launch: "
                                  "the worker at tls://10.0.0.0:40000 was lost; ")
        assert "rank 3 (worker) on node0 died: killed by SIGKILL" in message
        assert "rank 4 (worker) on node0 died: killed by SIGSEGV" in message
        assert message.endswith(
            "; and 9995 more: 9982 lost, 9 killed by SIGKILL, 4 killed by SIGSEGV"), message

    asyncio.run(scenario())


def test_no_worker_left_waits_for_the_certificates_on_their_way_and_no_longer():
    async def scenario() -> None:
        deaths = Deaths()
        for worker in ("w1", "w2"):
            deaths.departed_worker(worker)
        started_at = time.monotonic()
        asking = asyncio.ensure_future(deaths.why_none_left(10))
        await asyncio.sleep(0.05)
        logging.getLogger("hpcfutures").disabled = True
        try:
            deaths.record(certificate("w1", rank=4))
            await asyncio.sleep(0.05)
            assert not asking.done(), "answered before the last certificate came"
            deaths.record(certificate("w2", "SIGBUS", rank=5))
        finally:
            logging.getLogger("hpcfutures").disabled = False
        message = await asyncio.wait_for(asking, 1)
        assert time.monotonic() - started_at < scaled(1)
        assert message == ("no worker is left, and none can join this launch: "
                           "rank 4 (worker) on node0 died: killed by SIGSEGV; "
                           "rank 5 (worker) on node0 died: killed by SIGBUS")

    asyncio.run(scenario())


# --------------------------------------------------------------------- logs
def test_a_wave_of_deaths_logs_the_first_and_one_summary_line(lines, short_waves):
    async def scenario() -> None:
        deaths = Deaths()
        for i in range(50):
            deaths.record(certificate(f"w{i}", "SIGKILL" if i % 10 else "SIGSEGV", rank=i))
            await asyncio.sleep(0.001)
        await asyncio.sleep(short_waves * 2.5)
        said = lines.warnings()
        assert said[0] == "rank 0 (worker) on node0 died: killed by SIGSEGV"
        assert len(said) == 2, said
        assert said[1].startswith("49 more workers died within 0."), said[1]
        assert ": 45 killed by SIGKILL, 4 killed by SIGSEGV; the first few: " \
               "rank 1 (worker) on node0 died: killed by SIGKILL; rank 2 " in said[1], said[1]
        # and a later, isolated death is one line of its own, at once
        deaths.record(certificate("w99", rank=99))
        assert lines.warnings()[2:] == ["rank 99 (worker) on node0 died: killed by SIGSEGV"]
        await asyncio.sleep(short_waves * 2.5)
        assert len(lines.warnings()) == 3

    asyncio.run(scenario())


def test_a_waves_certificates_that_come_in_bursts_are_still_one_wave(lines, short_waves):
    """At 2,000 workers a scheduler busy with a map took 200 watchers' reports in three
    bursts seconds apart, and logged three waves (six lines): while workers that left
    still have certificates on their way, the wave stays open."""
    async def scenario() -> None:
        deaths = Deaths()
        for i in range(30):
            deaths.departed_worker(f"w{i}")
        for burst in range(3):
            for i in range(burst * 10, burst * 10 + 10):
                deaths.record(certificate(f"w{i}", "SIGKILL", rank=i))
            await asyncio.sleep(short_waves * 3)  # quiet for longer than a window
        said = lines.warnings()
        assert said[0] == "rank 0 (worker) on node0 died: killed by SIGKILL", said
        assert len(said) == 2, said
        assert said[1].startswith("29 more workers died within "), said[1]
        # with every certificate in, the next death is a line of its own, at once
        deaths.record(certificate("w99", rank=99))
        assert lines.warnings()[2:] == ["rank 99 (worker) on node0 died: killed by SIGSEGV"]

    asyncio.run(scenario())


def test_a_long_wave_reports_as_it_goes_and_the_close_flushes_it(lines, short_waves,
                                                                   monkeypatch):
    monkeypatch.setattr(waves, "WAVE_REPORT_EVERY", 0.3)

    async def scenario() -> None:
        coordinator, _ = await started()
        deaths = coordinator.deaths
        for i in range(8):  # one death every 0.1 s: never quiet for a window
            deaths.record(certificate(f"w{i}", rank=i))
            await asyncio.sleep(0.1)
        said = lines.warnings()
        assert 2 <= len(said) <= 5 and "more worker" in said[1], said
        await coordinator.close()  # the scheduler closes: what is held is said
        said = lines.warnings()
        total = sum(int(line.split()[0]) for line in said[1:])
        assert total == 7, said

    asyncio.run(scenario())


def test_the_client_says_a_wave_of_failed_starts_in_two_lines_not_one_per_worker(
        lines, short_waves):
    from hpcfutures._dask.client import _warn_of_startup_failures

    class Client:  # what the client's warnings are kept by (weakly)
        pass

    client = Client()

    async def scenario() -> None:
        why = "OSError: [Errno 28] No space left on device"
        failures = [f"rank {i + 3} (worker) on node0 failed to start: {why}" for i in range(50)]
        _warn_of_startup_failures(client, failures[:1])
        _warn_of_startup_failures(client, failures)  # the first again: not said twice
        await asyncio.sleep(short_waves * 2.5)
        said = lines.warnings()
        assert len(said) == 2, said
        assert said[0] == f"{failures[0]}; the launch goes on with the other workers"
        assert said[1].startswith(f"49 more workers failed to start within 0.0 s: 49 {why};")

    asyncio.run(scenario())


def test_a_wave_of_failed_starts_logs_one_summary_line(lines, short_waves):
    async def scenario() -> None:
        coordinator, scheduler = await started(expected_workers=100)
        scheduler.join(coordinator, "tls://a:1", "rank-2")
        for i in range(20):
            coordinator._startup_failed(f"rank {i + 3} (worker) on node{i // 4}",
                                        "OSError: [Errno 28] No space left on device")
        await asyncio.sleep(short_waves * 2.5)
        said = lines.warnings()
        assert said == [
            "rank 3 (worker) on node0 failed to start: OSError: [Errno 28] No space left "
            "on device",
            "19 more workers failed to start within 0.0 s: 19 OSError: [Errno 28] No space "
            "left on device; the first few: rank 4 (worker) on node0 failed to start: "
            "OSError: [Errno 28] No space left on device; rank 5 (worker) on node0 failed "
            "to start: OSError: [Errno 28] No space left on device; rank 6 (worker) on "
            "node0 failed to start: OSError: [Errno 28] No space left on device"], said
        assert len(coordinator.startup_failures) == 20  # each still told to the client
        assert sum(topic == STARTUP_TOPIC for topic, _ in scheduler.events) == 20

    asyncio.run(scenario())


def test_workers_slow_to_create_their_scratch_directories_are_one_line_and_a_summary(
        lines, short_waves):
    """150 workers starting on one node queue on their scratch directory's lock files;
    Dask warned in each of them.  They tell the scheduler instead, which folds them."""

    async def scenario() -> None:
        coordinator, scheduler = await started(expected_workers=60)
        for i in range(50):
            slow = {"scratch": {"seconds": 1.5 + i / 10, "directory": "/tmp/dask-scratch-space"},
                    "host": "node1"} if i % 5 else {"host": "node1", "scratch": None}
            scheduler.join(coordinator, f"tls://b:{i}", f"rank-{i + 2}", description=slow)
        await asyncio.sleep(short_waves * 2.5)
        said = lines.warnings()
        assert len(said) == 2, said
        assert said[0] == (
            "rank-3 on node1 took 1.6 s to create its scratch directory in "
            "/tmp/dask-scratch-space (many workers starting at once on one node queue on its "
            "lock files, or it is on a network file system: DASK_TEMPORARY_DIRECTORY=<a local "
            "disk> moves it)"), said
        assert said[1].startswith(
            "39 more workers were slow to create their scratch directories within "), said
        assert "39 in /tmp/dask-scratch-space on node1; the first few: rank-4 on node1" in said[1]
        assert said[1].endswith("scratch directory in /tmp/dask-scratch-space (many workers "
                                "starting at once on one node queue on its lock files, or it is "
                                "on a network file system: DASK_TEMPORARY_DIRECTORY=<a local "
                                "disk> moves it)"), said
        assert said[1].count("DASK_TEMPORARY_DIRECTORY") == 1, said  # the advice once

    asyncio.run(scenario())


def test_a_closed_schedulers_departed_workers_silence_no_later_warning():
    """The late-heartbeat filter sits on Dask's process-wide logger: once its scheduler
    closes it goes (in a test run, an earlier scheduler's departed worker silenced a
    later one's warning about a stranger at the same address)."""
    import types

    dask_log = logging.getLogger("distributed.scheduler")
    late = logging.LogRecord("distributed.scheduler", logging.WARNING, __file__, 1,
                             "Received heartbeat from unregistered worker 'tls://10.0.0.1:1'.",
                             None, None)
    deaths = Deaths()
    deaths.install(types.SimpleNamespace(handlers={}))
    try:
        deaths.departed_worker("tls://10.0.0.1:1")
        assert not dask_log.filter(late)
    finally:
        deaths.uninstall()
    assert dask_log.filter(late), [  # who dropped it
        (f, getattr(f, "__dict__", None)) for f in dask_log.filters
        if not (f.filter(late) if hasattr(f, "filter") else f(late))]
