"""The loop thread behind the synchronous facade: what a caller on another thread sees."""

import asyncio
import os
import subprocess
import sys

import pytest
from helpers import JOBS, contract_passed, hpcfutures_run, run_job

from hpcfutures._support.loop import LoopThread

CONTRACT = JOBS / "contract_job.py"


@pytest.fixture
def loop():
    thread = LoopThread("test-loop")
    yield thread
    thread.stop()


def test_run_sync_returns_the_coroutines_result(loop):
    async def answer():
        return 42

    assert loop.run_sync(answer(), 5) == 42


def test_a_deadline_that_passes_raises_the_builtin_timeout_error(loop):
    async def forever():
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
        loop.run_sync(forever(), 0.2)


def test_a_timeout_inside_the_coroutine_reaches_the_caller_as_the_builtin_timeout_error(loop):
    # Python 3.10's asyncio.TimeoutError is not the builtin one; the facade's callers catch
    # the builtin one, and would miss the other (a named startup error would become a crash).
    async def waits_too_short():
        await asyncio.wait_for(asyncio.Event().wait(), 0.05)

    with pytest.raises(TimeoutError) as caught:
        loop.run_sync(waits_too_short(), 5)
    assert type(caught.value) is TimeoutError



@pytest.mark.timeout(60)
def test_a_dask_client_cancelled_while_reconnecting_as_the_loop_stops_logs_no_error():
    """Seen in CI: a client Ctrl-C'd while its Dask client was reconnecting to the
    scheduler that the same Ctrl-C had stopped.  The loop's teardown cancelled the
    reconnect, and Dask's ``log_errors`` (around ``Client._reconnect``) logged the
    ``CancelledError`` at ERROR on ``distributed.client``, a logger whose level
    Dask sets itself.  Dask's levels are back afterwards."""
    import logging

    from distributed import Client, Scheduler

    from hpcfutures._support.logs import quiet_dask_logging

    quiet_dask_logging({})  # as a launch starts (an earlier test may have ended one)
    heard: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record)

    dask_client = logging.getLogger("distributed.client")
    keep = Keep(logging.ERROR)
    dask_client.addHandler(keep)
    thread = LoopThread("test-loop")

    async def lose_the_scheduler():
        scheduler = await Scheduler(host="127.0.0.1", port=0, dashboard_address=None)
        client = await Client(scheduler.address, asynchronous=True, timeout=600,
                              set_as_default=False)
        await scheduler.close()
        while client.status != "connecting":  # Dask's _reconnect has begun
            await asyncio.sleep(0.01)
        return client

    try:
        level = dask_client.level
        client = thread.run_sync(lose_the_scheduler(), 30)
        thread.stop(10)
        assert not thread._thread.is_alive()
        # Its loop is gone, so nothing can close it any more; left "connecting", it
        # would try when collected (Dask's __del__: "RuntimeError: IOLoop is closed",
        # an unraisable-exception warning pinned on whichever later test ran then).
        client.status = "closed"
        assert [record for record in heard if record.exc_info] == [], \
            [record.getMessage() for record in heard]
        assert dask_client.level == level
    finally:
        dask_client.removeHandler(keep)


# ------------------------------------------- "loop thread only", in development mode
_MARKED = """
import threading
from hpcfutures._support.loop import LoopThread, loop_thread_only

class Engine:
    @loop_thread_only
    def send(self, x):
        return x + 1

engine = Engine()
loop = LoopThread("checked-loop")
done = threading.Event()
answers = []
loop.call_soon(lambda: (answers.append(engine.send(1)), done.set()))
done.wait(10)
print("ON THE LOOP", answers)
try:
    engine.send(1)
except AssertionError as err:
    print("REFUSED", err)
else:
    print("ALLOWED")
loop.stop()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dev_mode", [True, False])
def test_an_engine_method_called_off_the_loop_thread_is_refused_in_development_mode(dev_mode):
    flags = ["-X", "dev"] if dev_mode else []
    done = subprocess.run([sys.executable, *flags, "-c", _MARKED], capture_output=True,
                          text=True, timeout=50, env={**os.environ, "PYTHONDEVMODE": ""})
    assert done.returncode == 0, done.stderr
    assert "ON THE LOOP [2]" in done.stdout, done.stdout
    if dev_mode:
        assert ("REFUSED Engine.send runs on the executor's loop thread only, called on "
                "thread 'MainThread'") in done.stdout, done.stdout
    else:  # no check, no cost: the method is the one defined
        assert "ALLOWED" in done.stdout, done.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize("launch", ["laptop", "run"])
def test_the_contract_in_development_mode_runs_every_engine_method_on_the_loop_thread(launch):
    """Every check of the executor contract (submit, map, dependencies, bundles given
    back, timeouts, cancellation, a call that kills its worker, shutdown) with the
    engine's loop-thread assertions on, in every process of the launch."""
    env = {"PYTHONDEVMODE": "1", "PYTHONWARNINGS": "ignore"}
    if launch == "laptop":
        job = run_job([sys.executable, CONTRACT], timeout=200, env=env)
    else:
        job = hpcfutures_run(3, CONTRACT, timeout=200, env=env)
    assert "loop thread only" not in job.stdout + job.stderr, job
    assert contract_passed(job), job
