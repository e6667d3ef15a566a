"""``initializer=`` and ``initargs=`` as with ProcessPoolExecutor (laptop default; issue 15).

The contract runs an initializer under every launcher (``contract.EXECUTOR_OPTIONS``),
and ``jobs/ending_job.py initfail`` one that fails in a worker joining later.
"""

import concurrent.futures as cf
import os
import sys
import threading
import time

import pytest
from helpers import JOBS, child_pids, hpcfutures_run, run_job
from pace import scaled
from waiting import wait_until

import hpcfutures
from hpcfutures import BrokenHPCExecutor, ConfigurationError, SerializationError
from hpcfutures._support.config import resolve_settings

STATE: dict = {}


def remember(path, value):
    """Initializer: note who ran it, and in which thread."""
    STATE.setdefault("calls", []).append(value)
    STATE["thread"] = threading.get_ident()
    with open(os.path.join(path, str(os.getpid())), "a") as handle:
        handle.write(f"{value}\n")


def state(_=None):
    time.sleep(0.05)
    return os.getpid(), tuple(STATE.get("calls", ())), STATE.get("thread") == threading.get_ident()


class InitError(Exception):
    pass


def fail_after_the_first(path):
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise InitError("fails on purpose in the worker that joins later") from None


def always_fail():
    raise InitError("always fails")


def sleep_then(seconds, value=None):
    time.sleep(seconds)
    return value


@pytest.fixture
def late_worker(monkeypatch):
    """Local worker ``local-1`` joins 5 s after the others (a Dask preload)."""
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__PRELOAD", f'["{JOBS / "slow_join.py"}"]')
    monkeypatch.setenv("HPCFUTURES_TEST_SLOW_NAME", "local-1")
    monkeypatch.setenv("HPCFUTURES_TEST_SLOW_JOIN", "5")


@pytest.mark.timeout(90)
def test_runs_once_in_every_worker_also_one_that_joins_later(tmp_path, late_worker):
    before = child_pids()
    with hpcfutures.LocalExecutor(2, initializer=remember, initargs=(str(tmp_path), "v")) as ex:
        seen: dict = {}

        def both_seen():
            for pid, calls, same_thread in ex.map(state, range(8)):
                seen[pid] = (calls, same_thread)
            return len(seen) == 2
        wait_until(both_seen, 60, "calls on both workers, the late one included", first=0.1)
    assert all(entry == (("v",), True) for entry in seen.values()), seen
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(map(str, seen))
    assert all(p.read_text() == "v\n" for p in tmp_path.iterdir())
    wait_until(lambda: not (child_pids() - before), 15, "local workers to exit")


@pytest.mark.timeout(60)
def test_an_initializer_that_raises_breaks_the_executor_at_once():
    started = time.monotonic()
    with hpcfutures.LocalExecutor(1, initializer=always_fail) as ex:
        with pytest.raises(BrokenHPCExecutor) as caught:
            ex.submit(sleep_then, 0, 1)
    assert time.monotonic() - started < scaled(20)
    error = caught.value
    assert isinstance(error, cf.BrokenExecutor)
    assert type(error.__cause__) is InitError and "always fails" in str(error.__cause__)
    assert isinstance(error.__cause__.__cause__, hpcfutures.RemoteTraceback)
    assert "always_fail" in str(error), error


@pytest.mark.timeout(90)
def test_failing_in_a_worker_that_joins_later_fails_the_pending_calls(tmp_path, late_worker):
    with hpcfutures.LocalExecutor(2, initializer=fail_after_the_first,
                                  initargs=(str(tmp_path / "first"),)) as ex:
        pending = [ex.submit(sleep_then, 0.2, i) for i in range(60)]
        started = time.monotonic()
        errors = [f.exception(timeout=60) for f in pending]
        assert time.monotonic() - started < scaled(20)
        broken = [e for e in errors if e is not None]
        assert broken and all(isinstance(e, BrokenHPCExecutor) for e in broken), errors
        assert type(broken[0].__cause__) is InitError
        with pytest.raises(BrokenHPCExecutor):
            ex.submit(sleep_then, 0, 1)


def test_an_unpicklable_initializer_is_a_serialization_error_at_once():
    lock = threading.Lock()
    before = child_pids()
    with pytest.raises(SerializationError, match="initializer"):
        hpcfutures.LocalExecutor(1, initializer=remember, initargs=(lock, 1))
    with pytest.raises(TypeError, match="initializer must be a callable"):
        hpcfutures.LocalExecutor(1, initializer="not callable")
    assert child_pids() == before


@pytest.mark.parametrize("name", ["initializer", "initargs"])
def test_a_callable_cannot_come_from_text(name):
    variable = f"HPCFUTURES_{name.upper()}"
    with pytest.raises(ConfigurationError, match=f"environment variable {variable}.*keyword"):
        resolve_settings(environ={variable: "mymodule:setup"}, dask_config={})
    with pytest.raises(ConfigurationError, match=f"dask config hpcfutures.{name}.*keyword"):
        resolve_settings(environ={}, dask_config={name: "mymodule:setup"})
    settings = resolve_settings({"initializer": print, "initargs": [1]}, environ={},
                                dask_config={})
    assert settings.initializer is print and settings.initargs == (1,)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["laptop", "run"])
def test_a_global_the_initializer_sets_is_the_one_the_calls_read(how):
    """The functions of the user's script travel by value; on a worker they share one
    namespace, so what ``init`` sets is what ``predict`` (through a helper) reads."""
    script = JOBS / "init_global_job.py"
    job = (run_job([sys.executable, script, "2"], timeout=90) if how == "laptop"
           else hpcfutures_run(4, script, timeout=90))
    assert job.returncode == 0, job
    assert "POOL [42, 42, 42, 42]" in job.stdout, job
    assert "OURS [42, 42, 42, 42] [42, 42, 42, 42]" in job.stdout, job
