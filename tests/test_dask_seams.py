"""Pins on the private parts of Dask that ``hpcfutures._dask`` relies on.

``hpcfutures._dask`` is the one place that reaches into ``distributed``: it
shortens ``BatchedSend.interval``, adds scheduler handlers and worker stream
handlers, replaces the worker's ``close`` handlers, reads the scheduler's
``queued``/``unrunnable`` and each ``WorkerState``, counts ``startstops`` and
``suspicious`` in a scheduler plug-in, asks the ``identity``/``ncores``
RPCs, runs the executor's initializer in a worker plug-in (in
``Worker.executors["default"]``, before a late worker's first instruction), and
for MPI tasks takes reserved workers out of ``Scheduler.idle`` and
``idle_task_count`` (back with ``check_idle_saturated``) and frees them from
a ``transition`` hook.
None of that is Dask's public API, so a Dask release may rename any of it.
Each test here exercises one such seam for real, on a scheduler and workers in
this process (one asyncio loop, 127.0.0.1, no TLS), and fails with
a message naming the Dask attribute that changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import dask
import pytest
from distributed import Client, Scheduler
from distributed.batched import BatchedSend
from distributed.comm import CommClosedError, connect, listen
from distributed.core import Status
from distributed.scheduler import KilledWorker
from pace import scaled

import hpcfutures
from hpcfutures import _dask
from hpcfutures._dask._common import (
    CLOSE_TIMEOUT,
    STREAM_INTERVAL,
    VERDICT_CLOSE_TIMEOUT,
    _hurry,
)
from hpcfutures._dask.cluster import dashboard_facts_here
from hpcfutures._dask.mpigroups import USABLE
from hpcfutures._dask.release import IdleRelease
from hpcfutures._facade.core.capacity import ask_worker_memory, host_memory
from hpcfutures._reports.summary import CALLS_ANNOTATION
from hpcfutures._support.logs import quiet_dask_logging

pytestmark = pytest.mark.timeout(60)

#: Tasks wait at this gate, in the worker threads of this process, until a test opens it.
GATE = threading.Event()


def wait_at_gate(value: Any) -> Any:
    GATE.wait(20)
    return value


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@contextlib.contextmanager
def seam(what: str) -> Iterator[None]:
    """Turn Dask's missing attribute, key or argument into a failure that names the seam."""
    try:
        yield
    except (AttributeError, KeyError, TypeError) as err:
        pytest.fail(f"Dask changed {what}: {type(err).__name__}: {err}", pytrace=True)


@pytest.fixture(autouse=True)
def dask_log_levels() -> Iterator[None]:
    """Ending a launch silences Dask's loggers; give them back to the other tests."""
    import logging

    loggers = [logging.getLogger(name) for name in ("distributed", "tornado")]
    levels = [log.level for log in loggers]
    GATE.clear()
    yield
    GATE.set()
    quiet_dask_logging({})  # Dask's own levels of its children, and the end of "shutting down"
    for log, level in zip(loggers, levels, strict=True):
        log.setLevel(level)


@dataclass
class Live:
    """A scheduler service, its workers and a registered client, all in this process."""

    service: _dask.SchedulerService
    client: Client
    workers: list[_dask.WorkerService] = field(default_factory=list)
    serving: list[asyncio.Task[int | None]] = field(default_factory=list)

    @property
    def scheduler(self) -> Scheduler:
        assert self.service._scheduler is not None
        return self.service._scheduler

    async def add_worker(self, name: str, threads: int = 1,
                         memory_limit: str | int | None = None) -> _dask.WorkerService:
        worker = _dask.WorkerService(self.service.address, name=name, nthreads=threads,
                                     memory_limit=memory_limit, host="127.0.0.1",
                                     interface=None, timeout=10)
        await worker.join()
        self.workers.append(worker)
        self.serving.append(asyncio.ensure_future(worker.serve()))
        address = self.address_of(worker)
        with seam("WorkerState.status (Status.running once a worker may take tasks)"):
            await self.until(lambda: self.scheduler.workers[address].status is Status.running,
                             f"the scheduler seeing worker {name} running")
        return worker

    def address_of(self, worker: _dask.WorkerService) -> str:
        return str(worker._worker.address)

    async def until(self, condition: Any, what: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {timeout:g} s")
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def live(workers: int = 1, **options: Any) -> AsyncIterator[Live]:
    """A launch in miniature: scheduler, ``workers`` one-thread workers, the client."""
    service = await _dask.SchedulerService(host="127.0.0.1", interface=None, **options).start()
    cluster: Live | None = None
    try:
        client = await _dask.connect_client(service.address, 10)
        cluster = Live(service, client)
        for rank in range(workers):
            await cluster.add_worker(f"rank-{rank + 2}")
        yield cluster
    finally:
        GATE.set()
        if cluster is not None:
            await _dask.finish_client(cluster.client, 0, timeout=2)
        await service.close()
        if cluster is not None and cluster.serving:
            await asyncio.wait(cluster.serving, timeout=CLOSE_TIMEOUT + 2)
            for worker in cluster.workers:
                await worker.close()


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, 30))


# ------------------------------------------------------------ BatchedSend.interval
async def _delay_of_second_message(hurry: bool) -> float:
    """Seconds a BatchedSend made with a 2 s interval holds a message sent right after another."""
    received: asyncio.Queue[float] = asyncio.Queue()

    async def handle(comm: Any) -> None:
        with contextlib.suppress(CommClosedError):
            while True:
                for _ in await comm.read():
                    received.put_nowait(time.monotonic())

    async with listen("tcp://127.0.0.1:0", handle) as listener:
        comm = await connect(listener.contact_address, timeout=5)
        stream = BatchedSend(interval="2s")
        if hurry:
            _hurry(stream)
        stream.start(comm)
        try:
            stream.send({"n": 1})
            await asyncio.wait_for(received.get(), 5)
            sent = time.monotonic()
            stream.send({"n": 2})
            try:
                return await asyncio.wait_for(received.get(), 0.5) - sent
            except asyncio.TimeoutError:
                return math.inf
        finally:
            stream.abort()


def test_hurrying_a_batched_send_shortens_its_batching_interval():
    with seam("BatchedSend(interval=...) / BatchedSend.interval"):
        async def made_on_a_loop() -> BatchedSend:  # as Dask makes them (no loop: a warning)
            return BatchedSend(interval="5ms")

        assert hasattr(run(made_on_a_loop()), "interval"), (
            "Dask's BatchedSend has no `interval` attribute any more: _dask._hurry "
            "silently stops shortening Dask's batching delay")
        assert run(_delay_of_second_message(hurry=False)) > 0.5, (
            "a BatchedSend with a 2 s interval sent its second message at once: Dask no "
            "longer paces by `interval`, so setting it (_dask._hurry) means nothing")
        assert run(_delay_of_second_message(hurry=True)) < 0.3, (
            "BatchedSend.interval set by _dask._hurry did not shorten the batching delay")


def test_every_stream_hpcfutures_hurries_is_a_batched_send_that_got_hurried():
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (worker,) = cluster.workers
            streams = {
                "Client.scheduler_comm": lambda: cluster.client.scheduler_comm,
                "Scheduler.client_comms[<client id>]":
                    lambda: cluster.scheduler.client_comms[cluster.client.id],
                "Scheduler.stream_comms[<worker address>]":
                    lambda: cluster.scheduler.stream_comms[cluster.address_of(worker)],
                "Worker.batched_stream": lambda: worker._worker.batched_stream,
            }
            for name, stream in streams.items():
                with seam(name):
                    found = stream()
                assert isinstance(found, BatchedSend), f"Dask's {name} is no BatchedSend"
                assert found.interval == STREAM_INTERVAL, f"Dask's {name} was not hurried"

    run(scenario())


# -------------------------------------------------- handlers and the launch's end
def test_the_coordinators_handlers_and_hooks_carry_the_verdict_to_the_workers():
    async def scenario() -> None:
        async with live(workers=2) as cluster:
            coordinator = cluster.service.coordinator
            assert coordinator.client_seen.is_set() and (
                coordinator.client_id == cluster.client.id), (
                "the scheduler handler hpcfutures_register (added to Scheduler.handlers) "
                "was not reached by the client's RPC")
            await _dask.finish_client(cluster.client, 3, timeout=5)
            await cluster.until(coordinator.done.is_set,
                                "the launch ending through SchedulerPlugin.remove_client")
            assert coordinator.requested == 3, (
                "the goodbye (Client._send_to_scheduler -> Scheduler.stream_handlers"
                "['hpcfutures-finish'], ahead of 'close-client') did not record the status")
            # The client's status is its own process's: the others end well.
            assert coordinator.verdict == 0
            await cluster.until(lambda: all(w.verdict == 0 for w in cluster.workers),
                                "every worker receiving the verdict (Scheduler.stream_comms "
                                "-> Worker.stream_handlers['hpcfutures-verdict'])")

    run(scenario())


def test_a_serving_launch_stops_on_its_schedulers_stop_handler():
    """Scheduler.handlers["hpcfutures_stop"] (_dask/coordinator.py), asked by
    request_stop over Dask's comm (_dask/client.py): a serving launch's scheduler
    accepts the request and ends the launch with status 0."""
    from hpcfutures._dask.client import request_stop

    async def scenario() -> None:
        service = await _dask.SchedulerService(host="127.0.0.1", interface=None,
                                               keep_serving=True).start()
        try:
            with seam('Scheduler.handlers["hpcfutures_stop"], send_recv'):
                assert await request_stop(service.address, 5, reason="the test is done")
            status = await asyncio.wait_for(service.coordinator.until_stopped(), 5)
            assert status == 0, status
        finally:
            await service.close()

    run(scenario())


def test_a_worker_that_registers_after_the_end_still_gets_the_verdict():
    """Its rank would otherwise take the scheduler's closing for a failure and exit 1
    (SchedulerPlugin.add_worker -> Scheduler.worker_send)."""
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            cluster.service.coordinator.end(0, "the client finished")
            late = await cluster.add_worker("rank-9")
            await cluster.until(lambda: late.verdict == 0,
                                "the verdict reaching a worker that joined after the end")

    run(scenario())


def test_a_worker_that_cannot_start_says_why_and_the_client_hears_it_at_once():
    """Scheduler.handlers (ours) take the report; the client's wait for its first worker
    ends with the reason once every expected worker failed."""
    from hpcfutures import LauncherError

    async def scenario() -> None:
        async with live(workers=0, expected_workers=1) as cluster:
            bad = _dask.WorkerService(cluster.service.address, name="rank-2", nthreads=1,
                                      memory_limit=None, host=None, interface="nope0",
                                      timeout=10)
            with pytest.raises(Exception) as failed:
                await bad.join()
            why = _dask.startup_error(failed.value)
            assert why.startswith("ValueError: 'nope0' is not a valid network interface"), (
                f"Dask's 'Worker failed to start' no longer carries its cause: {why}")
            assert await _dask.report_startup_failure(
                cluster.service.address, "rank 2 (worker) on node17", why, 5)
            started = time.monotonic()
            with pytest.raises(LauncherError, match=r"rank 2 \(worker\) on node17 failed to "
                                                    r"start: ValueError: 'nope0'"):
                await _dask.wait_for_workers(cluster.client, 30)
            assert time.monotonic() - started < scaled(2)

    run(scenario())


def test_one_worker_that_cannot_start_among_several_is_a_warning(caplog):
    async def scenario() -> None:
        async with live(workers=0, expected_workers=2) as cluster:
            await _dask.report_startup_failure(cluster.service.address, "rank 3 (worker)",
                                               "OSError: no such address", 5)
            waiting = asyncio.ensure_future(_dask.wait_for_workers(cluster.client, 30))
            await asyncio.sleep(0.3)
            assert not waiting.done(), "one failure of two expected workers ended the wait"
            await cluster.add_worker("rank-2")
            await asyncio.wait_for(waiting, 10)
            await cluster.until(lambda: "the launch goes on with the other workers" in
                                caplog.text, "the client's warning (client.subscribe_topic)")

    run(scenario())


def test_the_workers_close_handler_is_ours_and_does_not_wait_for_running_tasks():
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (worker,) = cluster.workers
            assert worker._worker.stream_handlers["close"] == worker.close, (
                "Dask's Worker.stream_handlers has no 'close' entry to replace")
            assert worker._worker.handlers["close"] == worker.close
            task = cluster.client.submit(wait_at_gate, 1, key="gated-x1-1", pure=False)
            await cluster.until(lambda: worker._worker.state.executing_count == 1,
                                "the gated task starting")
            await _dask.finish_client(cluster.client, 0)  # as a launch ends: client first
            started = time.monotonic()
            await cluster.service.close()  # Dask sends {"op": "close"} down the worker's stream
            await asyncio.wait(cluster.serving, timeout=CLOSE_TIMEOUT + 2)
            took = time.monotonic() - started
            assert worker._closed.is_set(), (
                "the scheduler closed the worker without Worker.stream_handlers['close'] "
                "(ours), so a running task may keep the rank alive")
            # Dask's own close would wait for the task; WorkerService gives up on it
            # only after CLOSE_TIMEOUT (5 s).
            assert took < scaled(3), f"closing the worker waited {took:.1f} s for its running task"
            with seam("distributed.core.Status names read by WorkerService and IdleRelease"):
                assert worker._worker.status.name in (
                    "stopping", "stopped", "closing", "closed", "failed")
                assert {s.name for s in Status} >= {
                    "running", "closing_gracefully", "stopping", "stopped", "closing",
                    "closed", "failed"}
            del task

    run(scenario())



def test_after_the_verdict_a_close_that_sticks_is_left_within_a_second():
    """Under MPI the launcher returns only once every rank finalizes: a worker
    whose Dask close hangs (its goodbye to a scheduler that is closing too) must
    not hold the launch for the full close limit once the launch is over."""
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (worker,) = cluster.workers
            dask_close = worker._worker.close
            stuck = asyncio.Event()

            async def sticking_close(**_: Any) -> None:
                await stuck.wait()

            worker._worker.close = sticking_close  # type: ignore[method-assign]
            try:
                worker._record_verdict(0)  # what the scheduler's verdict message does
                started = time.monotonic()
                await worker.close("scheduler-close")
                took = time.monotonic() - started
                assert worker._closed.is_set()
                assert VERDICT_CLOSE_TIMEOUT <= took < VERDICT_CLOSE_TIMEOUT + 1, (
                    f"a stuck close held the rank {took:.1f} s after the verdict")
            finally:
                worker._worker.close = dask_close  # type: ignore[method-assign]
                await dask_close(executor_wait=False)

    run(scenario())

# ------------------------------------------------------------- idle release
def test_release_counts_unrunnable_work_as_waiting_and_the_scheduler_queues_nothing():
    async def scenario() -> None:
        async with live(workers=2) as cluster:
            scheduler = cluster.scheduler
            release = IdleRelease(scheduler, idle_after=0, keep=1, say_goodbye=print)
            with seam("Scheduler.unrunnable / WorkerState.processing"):
                assert not release._busy() and len(release.idle_workers(time.monotonic())) == 2
            keys = [f"gated-x1-{i}" for i in range(8)]
            gated = cluster.client.map(wait_at_gate, range(8), key=keys, pure=False)
            with seam("WorkerState.processing (every task given to a worker at once)"):
                await cluster.until(lambda: sum(len(ws.processing) for ws in
                                                scheduler.workers.values()) == 8,
                                    "all eight tasks given to the workers")
                assert not scheduler.queued, "hpcfutures' scheduler queued tasks"
            GATE.set()
            assert await cluster.client.gather(gated) == list(range(8))
            gpu = cluster.client.submit(nap, 0, resources={"GPU": 1}, key="gpu-x1-1",
                                        pure=False)
            with seam("Scheduler.unrunnable (tasks no worker can run)"):
                await cluster.until(lambda: len(scheduler.unrunnable) == 1,
                                    "a task needing a GPU in Scheduler.unrunnable")
                assert release._busy(), "IdleRelease did not see Scheduler.unrunnable"
                assert release.idle_workers(time.monotonic()) == []
            await cluster.client.cancel([gpu])

    # Dask's default would queue six of the eight root tasks on two one-thread workers.
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        run(scenario())


def test_release_retires_an_idle_worker_through_dask_and_keeps_the_busy_one():
    async def scenario() -> None:
        async with live(workers=2) as cluster:
            busy = cluster.client.submit(wait_at_gate, "kept", key="gated-x1-1", pure=False)
            await cluster.until(lambda: any(w._worker.state.executing_count
                                            for w in cluster.workers), "the gated task starting")
            release = cluster.service.release_idle_workers(idle_after=0.2, keep=1)
            with seam("Scheduler.retire_workers / close_worker / worker_send"):
                await cluster.until(lambda: len(release.released) == 1,
                                    "the idle worker retiring", timeout=10)
            idle = next(w for w in cluster.workers if not w._worker.state.executing_count)
            assert release.released == [idle.name]
            await cluster.until(lambda: idle.verdict == 0 and idle._closed.is_set(),
                                "the retired worker receiving status 0 and closing")
            assert await _dask.released_workers(cluster.client) == {idle.name}, (
                "the hpcfutures_released handler (Scheduler.handlers) did not answer")
            assert await _dask.worker_names(cluster.client) == {
                cluster.address_of(w): w.name for w in cluster.workers if w is not idle}
            GATE.set()
            assert await busy.result() == "kept"

    run(scenario())


# ------------------------------------------------------------- the summary's ledger
def test_the_usage_ledger_counts_calls_busy_time_and_calls_rerun_after_a_loss():
    async def scenario() -> None:
        async with live(workers=2) as cluster:
            name = await _dask.start_usage(cluster.client)
            with seam("SchedulerPlugin.transition(..., startstops=[{action, start, stop}])"):
                with dask.annotate(**{CALLS_ANNOTATION: 3}):  # as _facade/core/sending.py does
                    napping = cluster.client.submit(nap, 0.05, key="nap-1", pure=False)
                assert await napping.result() == 0.05
            with dask.annotate(**{CALLS_ANNOTATION: 2}):
                gated = cluster.client.submit(wait_at_gate, 7, key="gated-2", pure=False)
            scheduler = cluster.scheduler
            await cluster.until(lambda: "gated-2" in scheduler.tasks
                                and scheduler.tasks["gated-2"].processing_on is not None,
                                "the gated task starting")
            first = scheduler.tasks["gated-2"].processing_on
            assert first is not None
            await scheduler.remove_worker(first.address, stimulus_id="seam-test-lost")
            # No retry (allowed_failures=0): the client sends the calls again itself.
            with pytest.raises(KilledWorker):
                await gated.result()
            GATE.set()
            report = await _dask.usage_report(cluster.client, name)
            assert report is not None, "Scheduler.plugins did not hold the ledger"
            workers = report["workers"]
            assert sum(w["calls"] for w in workers) == 5, (
                "calls not counted: Dask's SchedulerPlugin.transition(key, 'processing', "
                "'memory', worker=...) hook or TaskState.annotations (set by dask.annotate "
                "around Client.submit) changed, or the ledger raised in it (see the log)")
            assert sum(w["busy"] for w in workers) >= 0.04, (
                "no compute time counted: Dask's transition hook no longer passes "
                "startstops=[{'action': 'compute', 'start', 'stop'}]")
            assert report["retried"] == 2, (
                "calls re-run after a lost worker not counted: TaskState.suspicious")
            assert [w["lost"] for w in workers].count(True) == 1
            assert await _dask.usage_report(cluster.client, name) is None, (
                "Scheduler.remove_plugin(name=...) did not remove the ledger")

    run(scenario())


def test_the_version_check_of_a_join_sees_one_worker_per_installation():
    """Dask compares each joining worker's versions with every worker's (O(workers) per
    join, 8 % of the scheduler at 1,000 ranks): hpcfutures hands its check one worker
    per distinct installation, through the name Dask's scheduler module reads it by."""
    import distributed.scheduler as dask_scheduler
    import distributed.versions

    from hpcfutures._dask.versions import check_versions_once_per_installation

    check_versions_once_per_installation()
    with seam("distributed.scheduler.version_module (add_worker's version check)"):
        checker = dask_scheduler.version_module
    assert checker._module is distributed.versions
    seen: list[int] = []
    real = distributed.versions.error_message

    def counting(scheduler: Any, workers: Any, source: Any, source_name: str = "Client") -> Any:
        seen.append(len(workers))
        return real(scheduler, workers, source, source_name=source_name)

    async def scenario() -> None:
        with mock.patch.object(distributed.versions, "error_message", counting):
            async with live(workers=3):
                pass

    run(scenario())
    assert seen and max(seen) == 1, seen  # three workers, one installation
    # Mixed installations: Dask's own warning, naming each version once.
    here = distributed.versions.get_versions()
    other = {**here, "packages": {**here["packages"], "toolz": "0.0.1"}}
    workers = {"tls://a:1": here, "tls://b:1": here, "tls://c:1": other}
    ours = checker.error_message(here, workers, here, source_name="w")

    def same_order(text: str) -> str:  # a set of versions prints in hash order
        return re.sub(r"\{[^{}]*\}", lambda m: str(sorted(m.group(0)[1:-1].split(", "))), text)

    theirs = real(here, workers, here, source_name="w")
    assert {k: same_order(v) for k, v in ours.items()} == {
        k: same_order(v) for k, v in theirs.items()}
    assert "toolz" in ours["warning"] and "0.0.1" in ours["warning"]
    # The odd worker leaves: its installation is forgotten with it.
    del workers["tls://c:1"]
    assert checker.error_message(here, workers, here, source_name="w")["warning"] == ""


def gather_at_gate(*values: Any) -> Any:
    GATE.wait(20)
    return sum(values)


def test_a_wave_of_removals_reaches_only_the_workers_waiting_for_their_data_together():
    """Dask tells every worker of each removal (Scheduler.remove_worker -> worker_send,
    op "remove-worker"), one message each: D x N messages for a wave of D deaths among
    N workers, though a worker acts on one only for the data it was to fetch from the
    removed worker.  hpcfutures' scheduler tells the workers running a dependent of what
    a removed worker held, its notices held REMOVALS_WAIT s and sent together; a worker
    that waits for nothing from them hears nothing."""
    from hpcfutures._dask.scheduler import REMOVALS_WAIT

    async def scenario() -> None:
        async with live(workers=5) as cluster:
            scheduler, client = cluster.scheduler, cluster.client
            waiting, bystander, *holders = [cluster.address_of(w) for w in cluster.workers]
            held = [client.submit(nap, 0, workers=[h], pure=False) for h in holders]
            await client.gather(held)
            dependent = client.submit(gather_at_gate, *held, workers=[waiting], pure=False)
            await cluster.until(lambda: getattr(scheduler.tasks.get(dependent.key),
                                                "processing_on", None) is not None,
                                "the dependent running on its worker")
            # Its arguments fetched, and the scheduler told so: removing their first holder
            # then loses no data, so the dependent stays where it is for every removal
            # (else Dask sends it back to waiting, and the later removals tell nobody).
            await cluster.until(lambda: all(
                waiting in {ws.address for ws in scheduler.tasks[f.key].who_has}
                for f in held), "the dependent's worker holding its arguments")
            sent: dict[str, list[tuple[float, Any]]] = {waiting: [], bystander: []}
            for address, record in sent.items():
                stream = scheduler.stream_comms[address]

                def recording(*msgs: Any, record=record, real=stream.send) -> None:
                    record.extend((time.monotonic(), m) for m in msgs)
                    real(*msgs)

                stream.send = recording
            started = time.monotonic()
            with seam("Scheduler.remove_worker(address, stimulus_id=...)"):
                await asyncio.gather(*(scheduler.remove_worker(a, stimulus_id="wave")
                                       for a in holders))
            await asyncio.sleep(REMOVALS_WAIT * 4)
            notices = [(t, m) for t, m in sent[waiting] if m.get("op") == "remove-worker"]
            assert sorted(m["worker"] for _, m in notices) == sorted(holders), (
                f"Dask changed how it tells workers of a removal: {sent[waiting]}")
            times = [t for t, _ in notices]
            assert min(times) - started >= REMOVALS_WAIT * 0.9, "not held"
            assert max(times) - min(times) < REMOVALS_WAIT / 2, "not sent together"
            assert not [m for _, m in sent[bystander] if m.get("op") == "remove-worker"], (
                "a worker that waits for nothing was told")
            assert cluster.workers[0]._worker is not None
            await cluster.until(lambda: not any(
                a in cluster.workers[0]._worker.state.has_what for a in holders),
                "the waiting worker forgetting the removed workers")

    run(scenario())


def test_a_task_without_dependencies_is_placed_without_comparing_every_worker():
    """Dask places a "root-ish" task (its group larger than twice the threads: a map's
    calls) by comparing every worker's objective when its queue is off, as on
    hpcfutures' scheduler; at 2,000 workers the calls sent again after a wave of deaths
    blocked the scheduler's loop for 10-13 s that way.  hpcfutures' scheduler places a
    dependency-free task by Dask's O(1) path; every task still runs, on every worker."""

    def square(x: int) -> int:
        return x * x

    async def scenario() -> None:
        async with live(workers=4) as cluster:  # a launch's scheduler
            scheduler = cluster.scheduler
            compared = []
            real_objective = scheduler.worker_objective

            def counting(ts: Any, ws: Any) -> Any:
                compared.append(ws)
                return real_objective(ts, ws)

            scheduler.worker_objective = counting  # type: ignore[method-assign]
            futures = cluster.client.map(square, range(40), pure=False)
            assert await cluster.client.gather(futures) == [x * x for x in range(40)]
            assert compared == [], f"{len(compared)} comparisons of a worker's objective"
            ts = scheduler.tasks[futures[0].key]
            with seam("SchedulerState.is_rootish(ts) (a big group without dependencies)"):
                assert Scheduler.is_rootish(scheduler, ts), "Dask no longer calls it root-ish"
            held_by = {ws.address for f in futures for ws in scheduler.tasks[f.key].who_has}
            assert len(held_by) > 1, "every call ran on one worker"

    run(scenario())


def test_a_small_graph_is_made_ready_on_the_loop_and_a_large_one_in_dasks_thread(monkeypatch):
    """Dask hands every graph to a thread to build and order its tasks; for one call
    the two hops cost more than the work (a round trip 0.35 ms longer).  hpcfutures'
    scheduler builds a small graph on its loop and leaves a large one to Dask's thread,
    which only works while update_graph calls ``distributed.scheduler.offload``."""
    from hpcfutures._dask import scheduler as ours

    offloaded: list[str] = []

    async def counting(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        offloaded.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    real = ours._dask_offload
    monkeypatch.setattr(ours, "_dask_offload", counting)

    def square(x: int) -> int:
        return x * x

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            assert await cluster.client.submit(square, 3, pure=False) == 9
            assert offloaded == [], f"a one-task graph went to Dask's thread: {offloaded}"
            many = cluster.client.map(square, range(ours.INLINE_GRAPH_TASKS + 1), pure=False)
            assert await cluster.client.gather(many) == [
                x * x for x in range(ours.INLINE_GRAPH_TASKS + 1)]
            with seam("Scheduler.update_graph's offload(...) of the graph's materialization"):
                assert offloaded, "Dask's update_graph no longer calls scheduler.offload"

    run(scenario())


# ------------------------------------------------------------- what the client asks
def test_the_client_learns_workers_threads_and_memory_from_the_scheduler(monkeypatch):
    from hpcfutures._remote import memory

    enforced: list[int | None] = []
    monkeypatch.setattr(memory, "enforce", enforced.append)

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (plain,) = cluster.workers
            limited = await cluster.add_worker("rank-3", threads=2, memory_limit=2**30)
            await cluster.client.wait_for_workers(2, timeout=10)
            assert enforced == [None, 2**30], (
                "the worker enforced no limit, or another than Dask parsed from its own")
            with seam("the scheduler's identity RPC: workers[addr]{name, nthreads, "
                      "memory_limit}"):
                facts = await _dask.worker_facts(cluster.client)
            assert facts == {
                cluster.address_of(plain): _dask.WorkerFacts("rank-2", 1, None),
                cluster.address_of(limited): _dask.WorkerFacts("rank-3", 2, 2**30)}
            with seam("Scheduler.total_nthreads, behind hpcfutures' cluster-size handler"):
                assert await _dask.cluster_size(cluster.client) == (2, 3)
            with seam("Client.scheduler_info()['total_threads']"):
                assert await _dask.total_threads(cluster.client) >= 1
            with seam("Client.run(fn, workers=..., on_error='return')"):
                answers = await _dask.ask_workers(cluster.client, host_memory,
                                                  [cluster.address_of(plain)])
            assert isinstance(answers[cluster.address_of(plain)], tuple)
            memory_now = await ask_worker_memory(cluster.client)
            assert memory_now[cluster.address_of(limited)].usable == 2**30
            assert memory_now[cluster.address_of(plain)].host_share > 0
            assert await _dask.released_workers(cluster.client) == set()

    run(scenario())


def test_a_workers_declared_memory_is_the_limit_dask_parses_or_its_share_of_the_host(
        monkeypatch):
    """distributed.worker_memory.parse_memory_limit and distributed.system.MEMORY_LIMIT
    (declared_resources in _dask/worker.py): the memory a worker declares for calls that
    state needs is the limit Dask parses from any of its spellings (bytes, a size, a
    fraction of the host), the same number the worker's memory manager holds (and the
    kernel enforces), and without a limit the worker's share of the host's memory."""
    from distributed.system import MEMORY_LIMIT

    from hpcfutures._remote import memory
    from hpcfutures._support.needs import CORES, MEMORY

    enforced: list[int | None] = []
    # The worker runs in this test's process: its limit must not become the process's.
    monkeypatch.setattr(memory, "enforce", enforced.append)

    with seam("distributed.worker_memory.parse_memory_limit, distributed.system.MEMORY_LIMIT"):
        in_bytes = _dask.declared_resources(2, 2**30, 0)
        as_size = _dask.declared_resources(2, "1GiB", 0)
        as_fraction = _dask.declared_resources(1, 0.5, 0)
        shared = _dask.declared_resources(1, None, 0, workers_on_host=4)
    assert in_bytes[MEMORY] == as_size[MEMORY] == 2**30 and in_bytes[CORES] == 2.0
    assert as_fraction[MEMORY] == pytest.approx(MEMORY_LIMIT / 2, rel=0.01)
    assert shared[MEMORY] == MEMORY_LIMIT // 4

    async def scenario() -> None:
        async with live(workers=0) as cluster:
            worker = await cluster.add_worker("rank-2", memory_limit="1GiB")
            with seam("hpcfutures' parse of the limit is the one Dask's worker made"):
                assert worker._worker.memory_manager.memory_limit == as_size[MEMORY]
            assert enforced == [as_size[MEMORY]], enforced

    run(scenario())


def test_a_call_whose_needs_no_worker_meets_is_failed_through_dasks_transitions():
    """Scheduler.transition(key, "erred", ...) and Scheduler.transitions on a task of
    Scheduler.unrunnable (_dask/stranded.py): once no worker can come, a call whose
    needs no worker present meets fails on the client with NoSuitableWorkerError, naming
    what it asked for; a call that a worker present can run is left alone."""
    from hpcfutures._dask.stranded import Stranded
    from hpcfutures._support.needs import GPUS

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            client = cluster.client
            stranded = client.submit(nap, 0.0, resources={GPUS: 1}, pure=False)
            runnable = client.submit(nap, 0.0, pure=False)
            assert await runnable == 0.0
            await cluster.until(lambda: len(cluster.scheduler.unrunnable) == 1,
                                "the call asking for a GPU unrunnable")
            watch = Stranded(lambda: True)
            watch.install(cluster.scheduler)
            with seam("Scheduler.unrunnable, Scheduler.transition(..., 'erred', exception=, "
                      "cause=), Scheduler.transitions"):
                failed = watch.fail_stranded()
            assert failed == [stranded.key], failed
            error = await stranded.exception()
            assert isinstance(error, hpcfutures.NoSuitableWorkerError), error
            assert "no worker left in this launch has that much" in str(error), error

    run(scenario())


def test_follow_cluster_hears_workers_join_and_leave():
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            heard: list[tuple[int, int]] = []
            gone: list[str] = []

            def changed(workers: int, threads: int, left: Any) -> None:
                heard.append((workers, threads))
                gone.extend(left)

            await _dask.follow_cluster(cluster.client, changed)
            assert heard == [(1, 1)] and gone == []
            second = await cluster.add_worker("rank-3", threads=2)
            with seam("Scheduler.log_event / Client.subscribe_topic / SchedulerPlugin."
                      "add_worker"):
                await cluster.until(lambda: heard[-1] == (2, 3), "the join being announced")
            address = cluster.address_of(second)
            await second.close()
            with seam("SchedulerPlugin.remove_worker"):
                await cluster.until(lambda: heard[-1] == (1, 1), "the leave being announced")
            assert gone == [address]

    run(scenario())


# ------------------------------------------------------- HTTP and the dashboard line
def test_without_the_dashboard_no_http_server_is_started():
    """Scheduler.__init__ and Worker.start_unsafe start Dask's HTTP server through
    Node.start_http_server, which hpcfutures' subclasses skip; renamed, Dask's
    server would come back here (as http_server and services["dashboard"])."""
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            worker = cluster.workers[0]._worker
            with seam("Node.start_http_server (Scheduler.__init__, Worker.start_unsafe)"):
                for node in (cluster.scheduler, worker):
                    assert not hasattr(node, "http_server"), f"{type(node).__name__} serves HTTP"
                    assert node.services == {}, node.services
            facts = await _dask.dashboard_facts(cluster.client)
            assert facts["port"] == 0 and facts["served"] is False, facts

    run(scenario())


def test_dashboard_facts_read_the_schedulers_http_server():
    async def scenario() -> None:
        service = await _dask.SchedulerService(host="127.0.0.1", interface=None,
                                               dashboard=True,
                                               dashboard_address="127.0.0.1:0").start()
        try:
            assert service._scheduler is not None
            with seam("Scheduler.http_server.address/.port, http_application.applications"):
                facts = dashboard_facts_here(service._scheduler)
            if facts["cannot_stop"]:  # this distributed with this bokeh: see the next test
                assert facts["port"] == 0 and not facts["served"], facts
                return
            assert facts["address"] == "127.0.0.1" and facts["port"] > 0, facts
            assert facts["served"] is facts["bokeh"], (
                "Dask's dashboard is not among Scheduler.http_application.applications")
        finally:
            await service.close()  # the close is what bokeh 3.10 broke in older releases

    run(scenario())


def test_a_dashboard_its_dask_cannot_stop_is_left_off_by_the_release_numbers(caplog):
    """distributed before 2026.8.0 stops bokeh's server with a synchronous ``stop()``
    in its running loop, which bokeh 3.10 refuses: the scheduler's close failed half-way.
    hpcfutures tells such a pair by the two release numbers alone and leaves the
    dashboard off, with a warning naming both fixes.  Not a seam: the check here, run on
    every supported release, is that the rule's release is the one whose Dask has the
    fix (``ServerNode._stop_services``)."""
    import importlib.metadata
    import importlib.util
    import logging

    from distributed.node import ServerNode

    from hpcfutures._dask._common import DASK_STOPS_BOKEH_310, dashboard_cannot_stop
    from hpcfutures._reports.dashboard import announce_dashboard

    release = tuple(int(p) for p in importlib.metadata.version("distributed").split(".")[:2])
    assert hasattr(ServerNode, "_stop_services") is (release >= DASK_STOPS_BOKEH_310), (
        f"distributed {release} and the fix for bokeh 3.10 disagree with the rule")
    bokeh = importlib.util.find_spec("bokeh") is not None
    new_bokeh = bokeh and tuple(
        int(p) for p in importlib.metadata.version("bokeh").split(".")[:2]) >= (3, 10)
    broken = new_bokeh and release < DASK_STOPS_BOKEH_310
    reason = dashboard_cannot_stop()
    assert bool(reason) is broken, reason
    facts = {"host": "h", "address": "", "port": 0, "served": False, "bokeh": True,
             "cannot_stop": "distributed 1 cannot stop the dashboard of bokeh 3.10"}
    with caplog.at_level(logging.WARNING, logger="hpcfutures"):
        announce_dashboard(facts)
    assert "left it off: distributed 1 cannot stop" in caplog.text


# ------------------------------------------------------- the executor's initializer
INITIALIZED: list[tuple[str, int]] = []


def note_initialized(tag: str) -> None:
    if INITIALIZED and tag == "fail-later":
        raise ValueError("a later worker's initializer fails")
    INITIALIZED.append((tag, threading.get_ident()))


def thread_and_marks(_: Any = None) -> tuple[int, int]:
    return threading.get_ident(), len(INITIALIZED)


def test_the_initializer_plugin_runs_before_a_workers_first_call_also_when_it_joins_later():
    """WorkerPlugin.setup runs on the workers present when the client registers it
    (the client waits), and on a worker that joins later before it reads the
    scheduler's first instruction; the initializer runs in the thread that runs calls
    (Worker.executors["default"]).  Its failure reaches the client as an event."""
    from hpcfutures._remote import initializer as remote
    from hpcfutures._remote.calls import run_task

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            failures: list[tuple[BaseException, str]] = []
            payload = remote.pack_initializer(note_initialized, ("fail-later",))
            with seam("Client.register_plugin / WorkerPlugin.setup / Worker.executors"
                      "['default'] / Client.run"):
                await _dask.register_initializer(
                    cluster.client, payload, lambda e, w: failures.append((e, w)))
            assert len(INITIALIZED) == 1 and not failures, (INITIALIZED, failures)
            thread, _ = await cluster.client.submit(thread_and_marks, pure=False)
            assert thread == INITIALIZED[0][1], "the initializer ran in another thread"
            # A call waiting for a worker that can take it: the late worker's first.
            waiting = cluster.client.submit(run_task, thread_and_marks, (1,), {},
                                            resources={"late": 1}, pure=False)
            late = _dask.WorkerService(cluster.service.address, name="rank-3", nthreads=1,
                                       memory_limit=None, host="127.0.0.1", interface=None,
                                       timeout=10, resources={"late": 1})
            await late.join()
            cluster.workers.append(late)
            cluster.serving.append(asyncio.ensure_future(late.serve()))
            with seam("Worker: plug-ins set up before handle_scheduler; Worker.log_event"):
                await cluster.until(lambda: failures, "the late worker's failure event")
                error, worker = failures[0]
                assert type(error) is ValueError and worker == "rank-3", failures
                # its first call was refused: no call runs where the initializer failed
                with pytest.raises(Exception, match="initializer raised ValueError"):
                    await waiting
    try:
        run(scenario())
    finally:
        remote._failure = None  # the workers of this test live in this process
        INITIALIZED.clear()


# ------------------------------------------------------------------ memory
def test_a_memory_limit_the_worker_already_fills_is_refused_before_it_joins():
    """The limit as Dask parses it (parse_memory_limit), with Dask's pause fraction
    (``distributed.worker.memory.pause``) and the process's resident memory: what
    Dask's pause decision reads, read the same ways by hpcfutures before the worker
    joins."""
    from hpcfutures import ConfigurationError

    async def scenario() -> None:
        async with live(workers=0) as cluster:
            small = _dask.WorkerService(cluster.service.address, name="rank-2", nthreads=1,
                                        memory_limit="50MiB", host="127.0.0.1",
                                        interface=None, timeout=10)
            with seam("distributed.worker_memory.parse_memory_limit"), \
                    pytest.raises(ConfigurationError, match=r"memory_limit=50\.0 MiB is too "
                                                            r"small for a worker"):
                await small.join()
            assert not cluster.scheduler.workers
            with dask.config.set({"distributed.worker.memory.pause": False}):
                unpaused = _dask.WorkerService(cluster.service.address, name="rank-3",
                                               nthreads=1, memory_limit="50MiB",
                                               host="127.0.0.1", interface=None, timeout=10)
                unpaused._refuse_a_limit_it_already_crosses()  # never paused: no hang

    run(scenario())


# ------------------------------------------------------- a worker that a call killed
def running_key(_: Any) -> str:
    """In a worker thread: the key hpcfutures reads for the task it runs (deathwatch's
    and the express outbox's source: Dask's public ``get_current_task``)."""
    return str(_dask.express.running_task_key())


def test_a_task_lost_with_its_worker_comes_back_at_once_with_the_worker_named(caplog):
    """Scheduler(allowed_failures=0): KilledWorker at once (no retry on the next worker),
    its ``task`` and ``last_worker.address`` read by _dask.lost_worker; Dask's own
    error line about it is dropped."""
    async def scenario() -> None:
        async with live(workers=2) as cluster:
            gated = cluster.client.submit(wait_at_gate, 7, key="gated-3", pure=False)
            scheduler = cluster.scheduler
            await cluster.until(lambda: "gated-3" in scheduler.tasks
                                and scheduler.tasks["gated-3"].processing_on is not None,
                                "the gated task starting")
            first = scheduler.tasks["gated-3"].processing_on
            assert first is not None
            with seam("Scheduler.remove_worker(address, stimulus_id=...)"):
                await scheduler.remove_worker(first.address, stimulus_id="seam-test-died")
            exception = await asyncio.wait_for(gated.exception(), 5)
            assert gated.status == "error", (
                "Dask retried a task lost with its worker: Scheduler(allowed_failures=0) "
                "no longer makes it fail at once")
            assert _dask.lost_worker(exception) == ("gated-3", first.address), (
                f"Dask's KilledWorker changed (task, last_worker.address): {exception!r}")
            assert _dask.lost_worker(ValueError("no")) is None
            assert "marked as failed because" not in caplog.text

    run(scenario())


# ------------------------------------------------------- lost and frozen workers
def test_a_gather_cancelled_before_its_turn_breaks_the_clients_later_gathers():
    """Why Completions never cancels a Dask gather (completions.worker_left): the client
    keeps the gather waiting for its turn in ``Client._gather_future`` for later ones to
    join; cancelled before it ran, it stays there, and every later gather fails.  Should
    a Dask release stop this, the old cancel-and-ask-again would be safe once more."""
    def double(x: int) -> int:
        return 2 * x

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            client = cluster.client
            done = client.submit(double, 2, pure=False)
            assert await done == 4
            poisoned = False
            for steps in range(8):  # the step at which the inner gather exists, not yet run
                gather = asyncio.ensure_future(client.gather([done]))
                for _ in range(steps):
                    await asyncio.sleep(0)
                gather.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gather
                with seam("Client._gather_future (the gather others join)"):
                    slot = client._gather_future
                if slot is not None:
                    with pytest.raises(asyncio.CancelledError):
                        await asyncio.wait_for(client.gather([done]), 5)
                    client._gather_future = client._gather_keys = None  # heal it for the end
                    poisoned = True
                    break
            assert poisoned, ("a cancelled Dask gather no longer breaks later ones: "
                              "Client._gather changed")
            assert await client.gather([done]) == [4]

    run(scenario())


def test_a_worker_tells_its_host_name_and_the_client_reads_it():
    """A worker describes itself on Dask's event channel as it joins (Worker.log_event;
    the Coordinator hears it through SchedulerPlugin.log_event, with the worker's
    address that Dask adds), and WorkerChanges passes its host name on to the client's
    roster, which names a worker that left by it; until then the roster has Dask's
    WorkerState.name and .host (an address)."""
    import socket

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (worker,) = cluster.workers
            address = cluster.address_of(worker)
            changes: list[Any] = []
            deadline = time.monotonic() + 5
            while ("+", address, _dask.WorkerPlace("rank-2", socket.gethostname())) \
                    not in changes and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                with seam("WorkerState.name and .host, read by WorkerChanges as it joins"):
                    _next, changes = await _dask.worker_changes(cluster.client, 0)
            assert changes[0][:2] == ("+", address) and changes[0][2].name == "rank-2", changes
            assert changes[-1] == ("+", address, _dask.WorkerPlace(
                "rank-2", socket.gethostname())), changes

    run(scenario())


def test_a_death_report_the_busy_scheduler_leaves_unanswered_is_made_again():
    """Seen at 2,000 workers: a scheduler busy with a map and a wave of 200 deaths
    answered none of the watchers' reports in time, each was given up after one
    try, and the client waited out its whole window for every one of them."""
    certificate = {"worker": "tls://10.0.0.9:4321", "who": "rank 7 (worker) on node3",
                   "how": "signal", "signal": "SIGKILL", "status": None, "culprit": None,
                   "running": [], "report": ""}

    async def scenario() -> None:
        async with live(workers=1, expected_workers=1) as cluster:
            handlers = cluster.scheduler.handlers
            record, tries = handlers[_dask.deaths.DEATH_OP], []

            async def busy_at_first(certificate: dict[str, Any]) -> str:
                tries.append(time.monotonic())
                if len(tries) == 1:  # the scheduler gets to it only after the sender gave up
                    await asyncio.sleep(1.0)
                    return "too late"
                return record(certificate)

            handlers[_dask.deaths.DEATH_OP] = busy_at_first
            assert await _dask.report_death(cluster.service.address, certificate, 0.3)
            assert len(tries) == 2
            answer = await _dask.death_certificate(cluster.client, certificate["worker"], 0)
            assert answer["certificate"]["how"] == "signal"
            # Nobody answers at all: the report gives up when told to, with the error.
            handlers[_dask.deaths.DEATH_OP] = lambda certificate: asyncio.sleep(30)
            started = time.monotonic()
            with pytest.raises((OSError, asyncio.TimeoutError)):
                await _dask.report_death(cluster.service.address, certificate, 0.2,
                                         keep_trying=1.0)
            assert time.monotonic() - started < scaled(3)

    run(scenario())


def test_a_running_tasks_key_is_read_through_get_current_task():
    async def scenario() -> None:
        async with live(workers=1) as cluster:
            future = cluster.client.submit(running_key, 1, key="which-key-1", pure=False)
            assert await future.result() == "which-key-1", (
                "get_worker().get_current_task() is not the running task's key: the "
                "death certificate can no longer name the call that killed a worker")

    run(scenario())


def test_a_death_certificate_reaches_the_client_through_the_scheduler():
    """The watcher's report (a Scheduler.handlers entry of ours) and the client's wait."""
    certificate = {"worker": "tls://10.0.0.9:1234", "who": "rank 5 (worker) on node17",
                   "how": "signal", "signal": "SIGSEGV", "status": None,
                   "culprit": {"key": "k-1", "index": 0, "function": "job.crash"},
                   "running": [], "report": "Fatal Python error: Segmentation fault"}

    async def scenario() -> None:
        async with live(workers=1, expected_workers=1) as cluster:
            waiting = asyncio.ensure_future(
                _dask.death_certificate(cluster.client, certificate["worker"], 10))
            await asyncio.sleep(0.1)
            assert not waiting.done(), "the client's wait did not wait for the certificate"
            assert await _dask.report_death(cluster.service.address, certificate, 5)
            answer = await asyncio.wait_for(waiting, 5)
            got = answer["certificate"]  # msgpack hands lists back as tuples
            assert {**got, "running": list(got["running"])} == certificate
            assert answer["none_left"] is None
            started = time.monotonic()
            missing = await _dask.death_certificate(cluster.client, "tls://nowhere:1", 0.2)
            assert missing["certificate"] is None and time.monotonic() - started < scaled(2)
            # A wave, in one request: each worker's answer (the known one and one that
            # never reports), waited for together.
            started = time.monotonic()
            wave = await _dask.death_certificates(
                cluster.client, [certificate["worker"], "tls://nowhere:2"], 0.3)
            assert set(wave) == {certificate["worker"], "tls://nowhere:2"}
            assert wave[certificate["worker"]]["certificate"]["how"] == "signal"
            assert wave["tls://nowhere:2"]["certificate"] is None
            assert time.monotonic() - started < scaled(2)
            (worker,) = cluster.workers
            address = cluster.address_of(worker)
            await cluster.scheduler.remove_worker(address, stimulus_id="seam-test-gone")
            gone = await _dask.death_certificate(cluster.client, "", 0)
            assert "no worker is left" in (gone["none_left"] or ""), gone

    run(scenario())


def test_a_heartbeat_read_after_its_workers_removal_is_no_warning(caplog):
    """A dead worker's last heartbeat, read after its removal, is not worth a line (a
    wave of hundreds gave a dozen); one from a worker never seen still warns."""

    async def scenario() -> None:
        async with live(workers=1, expected_workers=1) as cluster:
            (worker,) = cluster.workers
            address = cluster.address_of(worker)
            await cluster.scheduler.remove_worker(address, stimulus_id="seam-test-gone")
            with caplog.at_level("WARNING", logger="distributed.scheduler"):
                late = cluster.scheduler.heartbeat_worker(address=address, metrics={})
                stranger = cluster.scheduler.heartbeat_worker(address="tls://10.0.0.9:1",
                                                              metrics={})
            assert late == stranger == {"status": "missing"}  # what Dask does is unchanged
            warned = [r.getMessage() for r in caplog.records if r.name == "distributed.scheduler"
                      and "unregistered worker" in r.getMessage()]
            assert warned == ["Received heartbeat from unregistered worker 'tls://10.0.0.9:1'."]

    run(scenario())


def test_a_worker_slow_to_make_its_scratch_directory_tells_the_scheduler_not_the_console(
        monkeypatch, recwarn):
    """Dask warns in the worker when its scratch directory took over a second
    (distributed.core.warn_on_duration around WorkSpace); the worker tells the
    scheduler instead, in the event that describes it (Worker.log_event)."""
    import distributed.core

    from hpcfutures._dask._common import WORKER_TOPIC

    real = distributed.core.WorkSpace

    def slow_workspace(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.05)  # the behaviour: lock files queued behind 150 other workers
        return real(*args, **kwargs)

    async def scenario() -> None:
        async with live(workers=0) as cluster:
            monkeypatch.setattr(distributed.core, "WorkSpace", slow_workspace)
            await cluster.add_worker("rank-2")
            await cluster.until(lambda: cluster.scheduler.get_events(WORKER_TOPIC),
                                "the worker's description")
            ((_, described),) = cluster.scheduler.get_events(WORKER_TOPIC)
            said = described["scratch"]
            assert said and said["seconds"] >= 1.0, described
            assert said["directory"].endswith("dask-scratch-space"), said

    run(scenario())
    slow = [w for w in recwarn if "surprisingly long time" in str(w.message)]
    assert not slow, [str(w.message) for w in slow]


def test_timings_are_set_unless_the_user_set_them():
    """dask.config.defaults holds what Dask ships, to tell a user's value from it."""
    from hpcfutures._dask import tuning

    key = "distributed.comm.timeouts.tcp"
    with seam("dask.config.defaults"):
        shipped = tuning._dask_default(key)
    assert shipped == "30s", f"Dask's default {key} is now {shipped}: revisit tuning.SETTINGS"
    with dask.config.set({key: shipped}):
        tuning.apply()
        assert dask.config.get(key) == tuning.SETTINGS[key]
    with dask.config.set({key: "45s"}):
        tuning.apply()
        assert dask.config.get(key) == "45s"


def test_an_idle_worker_neither_profiles_nor_ticks_fifty_times_a_second():
    """An idle worker's own timers cost ~2.4 % of a core each: a scheduler sharing
    a node with 150 ranks (or a harness hosting 2,000) starved for CPU."""
    from hpcfutures._dask import tuning

    keys = ("distributed.worker.profile.enabled", "distributed.admin.tick.interval")
    with seam("dask.config: distributed.worker.profile.enabled, distributed.admin.tick"):
        assert tuning._dask_default(keys[0]) is True
        assert tuning._dask_default(keys[1]) == "20ms"
    with dask.config.set({key: tuning._dask_default(key) for key in keys}):
        tuning.apply()
        assert dask.config.get(keys[0]) is False and dask.config.get(keys[1]) == "500ms"
    with dask.config.set({keys[0]: True}), mock.patch.dict(
            os.environ, {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "True"}):
        tuning.apply()  # the user's own True, though it is Dask's default
        assert dask.config.get(keys[0]) is True

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            (worker,) = cluster.workers
            dask_worker = worker._worker
            with seam("Worker.periodic_callbacks['profile'] only with profiling on"):
                assert "profile" not in dask_worker.periodic_callbacks
            assert dask_worker.periodic_callbacks["tick"].callback_time == 500

    run(scenario())




def test_a_small_launch_steals_often_and_a_worker_reports_a_long_call_at_once():
    """WorkStealing reads distributed.scheduler.work-stealing-interval when the scheduler
    is made (hpcfutures sets 100 ms on a launch of at most 64 workers; a user's own
    value stays); Worker.heartbeat can be called at once, and the scheduler hears what
    the worker runs and for how long (Worker.periodic_callbacks['heartbeat'] says how
    often Dask itself sends it: the nudge only goes where that is at most a second)."""
    from hpcfutures._dask import tuning

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            with seam("WorkStealing._callback_time from work-stealing-interval"):
                assert cluster.scheduler.extensions["stealing"]._callback_time == 0.1
            (worker,) = cluster.workers
            dask_worker = worker._worker
            with seam("Worker.periodic_callbacks['heartbeat'], Worker.heartbeat"):
                assert dask_worker.periodic_callbacks["heartbeat"].callback_time <= 1000
                state = cluster.scheduler.workers[dask_worker.address]
                before = state.last_seen
                await dask_worker.heartbeat()
                assert state.last_seen > before, "the scheduler did not hear the heartbeat"

    run(scenario())
    with dask.config.set({tuning.STEALING_KEY: "250ms"}), tuning.stealing_often(2):
        assert dask.config.get(tuning.STEALING_KEY) == "250ms"  # the user's value stays
    with tuning.stealing_often(tuning.STEAL_OFTEN_UP_TO + 1):
        assert dask.config.get(tuning.STEALING_KEY) == tuning._dask_default(tuning.STEALING_KEY)


def test_without_retries_the_scheduler_keeps_no_queue():
    """``distributed.scheduler.worker-saturation: inf``, Dask's public setting, given
    while SchedulerService makes its scheduler (tuning.without_a_queue), also over a
    user's own value, which stays theirs outside: results lost with a worker are
    computed again at once, not held in Dask's queue until some other task ends."""
    from hpcfutures._dask import tuning

    async def scenario() -> None:
        with dask.config.set({tuning.SATURATION_KEY: 1.1}):
            async with live(workers=2) as cluster:
                assert dask.config.get(tuning.SATURATION_KEY) == 1.1
                await without_a_queue(cluster)

    async def without_a_queue(cluster: Any) -> None:
        scheduler = cluster.scheduler
        with seam("Scheduler reading distributed.scheduler.worker-saturation as it starts"):
            assert math.isinf(scheduler.WORKER_SATURATION)
        futures = cluster.client.map(nap, [0.01] * 12, pure=False)
        assert await cluster.client.gather(futures) == [0.01] * 12
        assert not scheduler.queued, "Dask queued tasks despite WORKER_SATURATION=inf"
        holder = next(ws for ws in scheduler.workers.values() if ws.has_what)
        await scheduler.remove_worker(holder.address, stimulus_id="seam-test-lost")
        again = await asyncio.wait_for(cluster.client.gather(futures), 10)
        assert again == [0.01] * 12

    run(scenario())


# ------------------------------------------------------ MPI tasks' reserved ranks
def test_ranks_are_reserved_together_kept_off_ordinary_tasks_and_never_released_as_idle():
    """mpigroups.RankGroups on a real scheduler: Scheduler.handlers for reserve and
    release, the Coordinator's transition hook, WorkerState.name/status/processing,
    and the scheduler's idle sets
    (Scheduler.idle, Scheduler.idle_task_count, Scheduler.check_idle_saturated)
    from which a reserved worker is taken until its member task arrives."""
    async def scenario() -> None:
        async with live(workers=3) as cluster:
            scheduler, client = cluster.scheduler, cluster.client
            groups = cluster.service.coordinator.groups
            assert USABLE <= {status.name for status in Status}, (
                "Dask renamed a worker status that mpigroups.USABLE names")
            with seam("Scheduler.handlers (hpcfutures_mpi_reserve)"):
                first = await _dask.reserve_ranks(client, "call-a", 2, wait=5)
            with seam("WorkerState.name (rank-<world rank>)"):
                assert list(first["world_ranks"]) == [
                    int(scheduler.workers[a].name[5:]) for a in first["workers"]]
            assert len(set(first["world_ranks"])) == 2, first
            held = set(first["workers"])
            with seam("Scheduler.idle / Scheduler.idle_task_count"):
                assert not held & set(scheduler.idle), "a reserved worker stayed idle for Dask"
                assert not {ws.address for ws in scheduler.idle_task_count} & held
                for address in held:  # as Dask does on a heartbeat or a task's end
                    scheduler.check_idle_saturated(scheduler.workers[address])
                assert not held & set(scheduler.idle), "Dask's own check made it idle again"
            # an ordinary task goes to the one worker nobody holds
            plain = client.submit(nap, 0, key="plain-x1-1", pure=False)
            assert await plain == 0
            assert not {ws.address for ws in scheduler.tasks["plain-x1-1"].who_has} & held
            # a second call for two waits (no part of a group is held meanwhile) ...
            waiting = asyncio.ensure_future(_dask.reserve_ranks(client, "call-b", 2, wait=5))
            await asyncio.sleep(0.3)
            assert not waiting.done() and len(groups.held) == 2
            # ... and the idle release never takes a held worker
            release = IdleRelease(scheduler, idle_after=0, keep=1, say_goodbye=print,
                                  held=groups.holds)
            assert not held & set(release.idle_workers(time.monotonic()))
            # the release grants the waiting call at once, and Dask may use the rest again
            with seam("Scheduler.handlers (hpcfutures_mpi_release) / check_idle_saturated"):
                await _dask.release_ranks(client, "call-a")
            second = await asyncio.wait_for(waiting, 5)
            assert len(set(second["workers"])) == 2 and second["tag"] != first["tag"]
            free = (held | {w for w in scheduler.workers}) - set(second["workers"])
            assert free <= set(scheduler.idle), "a released worker did not become idle again"
            # more ranks than the launch has: waits, and says so when it can never come
            groups.capacity = lambda: 3
            answer = await _dask.reserve_ranks(client, "call-c", 4, wait=1)
            assert "only 3 worker(s)" in answer["error"]
            await _dask.release_ranks(client, "call-b")
            assert not groups.held
            # the end of a call's member tasks frees its workers, without a release
            third = await _dask.reserve_ranks(client, "call-d", 1, wait=5, keys=["member-x1-0"])
            with seam("SchedulerPlugin.transition (a member task's end)"):
                assert await client.submit(nap, 0, key="member-x1-0", pure=False,
                                           workers=third["workers"],
                                           allow_other_workers=False) == 0
                await cluster.until(lambda: not groups.held, "the member's end freeing its rank")

    run(scenario())


def test_a_departed_workers_address_removed_from_the_pool_stops_connecting_at_once():
    """Dask's connect retries a refused connection for its whole timeout, so a gather
    that asked a dead worker for a result held its batch that long; the client now
    removes a departed worker's address from its pool, which ends such attempts."""
    import socket

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            with socket.socket() as spare:  # a port where nobody listens any more
                spare.bind(("127.0.0.1", 0))
                address = f"tcp://127.0.0.1:{spare.getsockname()[1]}"
            pool = cluster.client.rpc
            attempt = asyncio.ensure_future(pool.connect(address))
            with seam("ConnectionPool._connecting (the attempts under way, by address)"):
                await cluster.until(lambda: address in pool._connecting, "the attempt starting")
            await asyncio.sleep(0)
            assert not attempt.done(), "a refused connection is no longer retried: drop this"
            with seam("ConnectionPool.remove(address, reason=...)"):
                pool.remove(address, reason="the worker left")
            if sys.version_info < (3, 11):
                # Dask cancels the attempt's task there, and Python 3.10's wait_for
                # may swallow a cancellation that meets a refused connection (its
                # retry loop then goes on, as without the removal): best effort.
                attempt.cancel()
                with contextlib.suppress(asyncio.CancelledError, CommClosedError, OSError):
                    await asyncio.wait_for(attempt, 40)
                return
            with pytest.raises(CommClosedError, match="the worker left"):
                await asyncio.wait_for(attempt, 2)

    run(scenario())


def test_the_bridge_drops_its_connections_to_workers_that_left():
    from hpcfutures._facade.bridge import TaskBridge

    removed: list[tuple[str, str]] = []
    left: list[bool] = []
    asked: list[Any] = []
    bridge = mock.Mock(_workers=3, _total_threads=3, _closing=False)
    bridge._client.rpc.remove = lambda address, reason: removed.append((address, reason))
    bridge.completions.worker_left = lambda: left.append(True)
    bridge.in_background = asked.append
    TaskBridge.cluster_changed(bridge, 2, 2, ["tls://10.0.0.5:4000"])
    assert [address for address, _ in removed] == ["tls://10.0.0.5:4000"] and left == [True]
    assert bridge._workers == 2 and bridge._total_threads == 2
    # ... and asks at once who left, to name it before the launch may end.
    assert len(asked) == 1 and bridge.roster.refresh.call_count == 1


# ------------------------------------------- small results ahead of their task's end
def sent_ahead(value: Any) -> Any:
    """In a worker thread: send ``value`` ahead of this task's end (express.py), return it."""
    from hpcfutures._remote import express

    assert express.express(value), "the worker has no sender for small results"
    return value


def test_a_small_result_reaches_the_client_before_its_tasks_end():
    """The express rides Dask's public event channel: WorkerPlugin.transition (the
    worker's outbox) and Worker.log_event, the scheduler's events to the topic's
    subscribers, Client.subscribe_topic. What hpcfutures relies on beyond the
    documented calls is their order: the payload arrives while the client still sees
    the task pending, so no fetch from the worker is needed, and after the scheduler
    has handled the task's end, so the client's next call finds the worker free."""
    import pickle

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            arrived: list[tuple[Any, Any, str, str]] = []
            futures: dict[Any, Any] = {}

            def received(key: Any, payload: bytes) -> None:
                on_scheduler = cluster.scheduler.tasks[key].state
                arrived.append((key, pickle.loads(payload), futures[key].status, on_scheduler))

            _dask.expect_express_results(cluster.client, "hpcf-0123abcd-", received)
            # Dask's subscription is a message on the client's stream: seen by the
            # scheduler before the task it sends next.
            future = cluster.client.submit(sent_ahead, {"x": 7}, key="hpcf-0123abcd-ahead-1",
                                           pure=False)
            futures[future.key] = future
            with seam("the order of Worker.log_event and task-finished, and of the "
                      "scheduler's event and key-in-memory"):
                assert await future.result() == {"x": 7}
            assert arrived == [("hpcf-0123abcd-ahead-1", {"x": 7}, "pending", "memory")], \
                arrived

    run(scenario())


def test_a_launchs_security_builds_each_roles_tls_context_once_and_dask_uses_it():
    """Security.get_connection_args and get_listen_args, overridden by _OneContextPerRole
    (_dask/_common.py): Dask still asks them by role for keyword arguments that hold an
    SSLContext; the override hands out one context per role and direction, built once;
    and a TLS scheduler, a worker and a client started with it work together."""
    from hpcfutures._support.security import new_credentials

    security = _dask.make_security(new_credentials())
    assert security is not None
    with seam("Security.get_connection_args and get_listen_args"):
        client_args = security.get_connection_args("client")
        listen_args = security.get_listen_args("scheduler")
    for args in (client_args, listen_args):
        assert isinstance(args["ssl_context"], ssl.SSLContext), args
        assert args["require_encryption"] is True, args
    assert security.get_connection_args("client")["ssl_context"] is client_args["ssl_context"]
    assert security.get_listen_args("scheduler")["ssl_context"] is listen_args["ssl_context"]
    assert security.get_connection_args("worker")["ssl_context"] is not client_args["ssl_context"]

    async def scenario() -> None:
        service = await _dask.SchedulerService(host="127.0.0.1", interface=None,
                                               security=security).start()
        worker = None
        try:
            assert service.address.startswith("tls://"), service.address
            client = await _dask.connect_client(service.address, 10, security=security)
            try:
                worker = _dask.WorkerService(service.address, name="rank-2", nthreads=1,
                                             memory_limit=None, host="127.0.0.1",
                                             interface=None, timeout=10, security=security)
                await worker.join()
                assert await client.submit(nap, 0.0, pure=False) == 0.0
            finally:
                await _dask.finish_client(client, 0, timeout=2)
        finally:
            await service.close()
            if worker is not None:
                await worker.close()

    run(scenario())


def boom(_: Any = None) -> None:
    raise ValueError("boom, on purpose")


def test_dasks_reports_that_repeat_an_error_are_worded_as_hpcfutures_drops_them(monkeypatch,
                                                                               caplog):
    """Messages of Dask's loggers dropped by their text (_support/logs.py) and the
    client's "Sending large graph" warning (_dask/client.py): Dask still words them as
    hpcfutures matches them.  A task that raises makes its worker log what the error
    the client gets already says; a large argument makes the client warn; hpcfutures
    drops the one and ignores the other."""
    import logging
    import warnings

    from hpcfutures._support import logs

    quiet_dask_logging({})
    worker_log = logging.getLogger("distributed.worker")
    dropped = [f for f in worker_log.filters if isinstance(f, logs._DropDuplicateReport)]
    assert dropped, "quiet_dask_logging put no filter on distributed.worker"
    for each in dropped:  # to see what Dask logs before hpcfutures drops it
        monkeypatch.setattr(worker_log, "filters", [f for f in worker_log.filters
                                                    if f is not each])

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            with caplog.at_level(logging.WARNING, logger="distributed.worker"):
                error = await cluster.client.submit(boom, pure=False).exception()
                assert isinstance(error, ValueError), error
                await cluster.until(lambda: any(r.name == "distributed.worker"
                                                for r in caplog.records),
                                    "the worker reporting the failed task")
            reports = [r.getMessage() for r in caplog.records if r.name == "distributed.worker"]
            assert any(logs._DUPLICATES["distributed.worker"].search(text)
                       for text in reports), reports
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                large = b"x" * (11 * 2**20)  # above Dask's 10 MB threshold
                assert await cluster.client.submit(len, large, pure=False) == len(large)
            said = [w for w in caught if "Sending large graph" in str(w.message)]
            assert said and said[0].category is UserWarning, [str(w.message) for w in caught]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.filterwarnings("ignore", message="Sending large graph",
                                        category=UserWarning, module="distributed.client")
                assert await cluster.client.submit(len, large, pure=False) == len(large)
            assert not [w for w in caught if "Sending large graph" in str(w.message)]

    run(scenario())


def test_a_lost_scheduler_is_heard_before_dask_tries_to_reconnect():
    """Client._reconnect: called when the scheduler's stream drops; hpcfutures hears of
    it at once, not after Dask's reconnection attempts (its whole timeout)."""

    async def scenario() -> None:
        async with live(workers=0) as cluster:
            heard = asyncio.Event()
            with seam("Client._reconnect (called when the scheduler's stream drops)"):
                _dask.on_scheduler_lost(cluster.client, heard.set)
                await cluster.service.close()
                await asyncio.wait_for(heard.wait(), 5)

    run(scenario())


# ------------------------------------------------------------- Dask's default spans
def test_the_scheduler_and_workers_keep_no_spans_and_the_rest_of_dasks_extensions():
    """Scheduler(extensions=...) with distributed.scheduler.DEFAULT_EXTENSIONS less its
    spans, and Worker(extensions={}): Dask would file each graph sent after the previous
    one ended under a new default span and keep it for ever (an endless map's memory
    grows without end).  hpcfutures' scheduler has every other extension of Dask's (work
    stealing unless the configuration turns it off), keeps no span however many graphs
    arrive, and its workers report no span metrics."""
    import dask
    import distributed.scheduler

    with seam("distributed.scheduler.DEFAULT_EXTENSIONS (name -> extension class)"):
        dasks = dict(distributed.scheduler.DEFAULT_EXTENSIONS)
        assert "spans" in dasks and "stealing" in dasks, sorted(dasks)
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        assert "stealing" not in _dask.scheduler.extensions_without_spans()

    async def scenario() -> None:
        async with live(workers=1) as cluster:
            scheduler = cluster.scheduler
            assert set(scheduler.extensions) == set(dasks) - {"spans"}, sorted(
                scheduler.extensions)
            for n in range(4):  # each after the previous ended: Dask's new default span
                future = cluster.client.submit(nap, 0, key=f"span-graph-{n}", pure=False)
                assert await future.result() == 0
                del future
                await cluster.until(lambda n=n: f"span-graph-{n}" not in scheduler.tasks,
                                    "the task forgotten")
            (worker,) = cluster.workers
            assert "spans" not in worker._worker.extensions, sorted(worker._worker.extensions)
            await worker._worker.heartbeat()  # no span metrics: nothing for a missing extension
            future = cluster.client.submit(nap, 0, key="span-graph-after", pure=False)
            assert await future.result() == 0
            assert "spans" not in scheduler.extensions

    run(scenario())
