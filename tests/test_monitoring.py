"""Watching a run: map's progress bar, the dashboard line, the end-of-run
summary, and the pointers at the rank (and log file) that failed.

The bar and the summary are checked in this process against the laptop
default; the dashboard and the pointers through ``hpcfutures run``, for real.
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from types import SimpleNamespace

import pytest
from contract import CustomError, fail_on, square
from helpers import (
    JOBS,
    MARKER_VAR,
    ROOT,
    Lines,
    assert_no_leftovers,
    engine_stub,
    hpcfutures_run,
    rank_pid,
    require,
)

import hpcfutures
from hpcfutures._support.config import resolve_settings


def needs(package: str) -> None:
    """These optional packages are in the test extra: missing under CI=true is a failure."""
    import importlib.util

    require(importlib.util.find_spec(package) is not None,
            f"{package} (pip install -e '.[test]')")


MONITOR = JOBS / "monitor_job.py"


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize("raw, mode", [("1", "auto"), ("true", "auto"), ("auto", "auto"),
                                       ("ALWAYS", "always"), ("0", "off"), ("off", "off")])
def test_progress_setting_values(raw, mode):
    settings = resolve_settings(environ={"HPCFUTURES_PROGRESS": raw}, dask_config={})
    assert settings.progress == mode


def test_monitoring_settings_are_off_by_default_and_follow_precedence():
    settings = resolve_settings(environ={}, dask_config={})
    assert (settings.progress, settings.dashboard, settings.summary) == ("off", False, False)
    assert settings.dashboard_address == "127.0.0.1:8787"
    settings = resolve_settings({"summary": False},
                                environ={"HPCFUTURES_SUMMARY": "1", "HPCFUTURES_DASHBOARD": "1"},
                                dask_config={"dashboard_address": "127.0.0.1:9999",
                                             "progress": "always"})
    assert settings.summary is False and settings.dashboard is True
    assert settings.dashboard_address == "127.0.0.1:9999" and settings.progress == "always"
    assert settings.sources["progress"] == "dask config hpcfutures.progress"


def test_a_bad_progress_value_names_the_variable():
    with pytest.raises(hpcfutures.ConfigurationError, match=r"HPCFUTURES_PROGRESS.*'always'"):
        resolve_settings(environ={"HPCFUTURES_PROGRESS": "sometimes"}, dask_config={})


# -------------------------------------------------------------- pure helpers
def test_calls_are_read_from_task_annotations():
    from types import SimpleNamespace as Task

    from hpcfutures._dask.usage import UsageLedger, _calls_of
    from hpcfutures._reports.summary import CALLS_ANNOTATION

    assert _calls_of(Task(annotations={CALLS_ANNOTATION: 64})) == 64
    assert _calls_of(Task(annotations={CALLS_ANNOTATION: 0})) == 0  # picks a value only
    assert _calls_of(Task(annotations={})) == 1 and _calls_of(None) == 1
    assert _calls_of(Task(annotations={"priority": 3})) == 1
    tasks = {"chunk": Task(annotations={CALLS_ANNOTATION: 64}, suspicious=1),
             ("tuple", "key"): Task(annotations={}, suspicious=0)}
    worker = Task(name="rank-2", host="node3", nthreads=1)
    scheduler = Task(tasks=tasks, workers={"tcp://w": worker})
    ledger = UsageLedger()
    ledger._scheduler = scheduler
    ledger.add_worker(scheduler, "tcp://w")
    for key in tasks:
        ledger.transition(key, "processing", "memory", worker="tcp://w", startstops=[])
    ledger.transition("chunk", "waiting", "processing", worker="tcp://w")  # not an end
    assert ledger.workers["tcp://w"]["calls"] == 65
    assert ledger.retried == 64  # it ran on a worker that died


def test_tasks_carry_their_call_counts_even_when_sent_alone():
    import dask

    from hpcfutures._facade.core.futures import TaskFuture
    from hpcfutures._facade.core.sending import Sender
    from hpcfutures._remote.calls import run_chunk_task, run_task
    from hpcfutures._reports.summary import CALLS_ANNOTATION

    seen = {}

    class Client:  # records the annotations in force when each task is made
        def map(self, runner, *columns, key, pure):
            if len(key) > 1:
                raise TypeError("cannot pickle")  # a failed batch: each task goes alone
            seen[key[0]] = dask.get_annotations().get(CALLS_ANNOTATION)
            return [object()]

        def submit(self, runner, *args, key, pure):
            seen[key] = dask.get_annotations().get(CALLS_ANNOTATION)
            return object()

    sender = Sender(Client(), engine_stub(completions=SimpleNamespace(follow=lambda *_: None)))
    sender.count_calls = True
    chunk = ([(1,)] * 64,)
    sender.send_queued([(TaskFuture(), run_chunk_task, square, chunk, {}, False),
                        (TaskFuture(), run_chunk_task, square, chunk, {}, False),
                        (TaskFuture(), run_task, square, (1,), {}, False)])
    assert sorted(seen.values(), key=str) == [64, 64, None]  # one call: no annotation
    assert sum(key.endswith("-alone") for key in seen) == 2
    assert dask.get_annotations() == {}  # nothing leaks into the loop's context


def test_summary_table_sums_workers_and_names_losses():
    from hpcfutures._reports.summary import CallTally, format_summary

    tally = CallTally()
    tally.calls_done(100, failed=2)
    tally.mark_ready()
    usage = {"retried": 8, "workers": [
        {"name": "rank-10", "host": "10.0.0.2", "threads": 2, "calls": 40, "busy": 9.0,
         "present": 5.0, "lost": True},
        {"name": "rank-2", "host": "127.0.0.1", "threads": 2, "calls": 60, "busy": 10.0,
         "present": 10.0, "lost": False},
    ]}
    text = format_summary(tally, usage)
    lines = text.splitlines()
    assert lines[0].startswith("hpcfutures summary: 100 calls run, 2 failed; wall time")
    assert "8 calls re-run after 1 worker(s) were lost" in lines[0]
    assert lines[2].split()[:1] == ["rank-2"] and lines[2].split()[-1] == "50%"
    assert "rank-10 on 10.0.0.2 (lost)" in lines[3] and lines[3].endswith("90%")
    assert lines[4].split() == ["all", "2", "workers", "4", "100", "19.0", "63%"]
    assert "did not answer" in format_summary(tally, None)


def test_dashboard_line_gives_the_url_and_a_tunnel():
    from hpcfutures._reports.dashboard import dashboard_line

    line = dashboard_line({"host": "node17", "address": "127.0.0.1", "port": 8788})
    assert "http://127.0.0.1:8788/status (on node17)" in line
    assert "ssh -L 8788:127.0.0.1:8788 node17" in line and "\n" not in line
    line = dashboard_line({"host": "node17", "address": "0.0.0.0", "port": 8788})
    assert "http://node17:8788/status" in line and "ssh -L 8788:localhost:8788 node17" in line


def test_run_pointer_names_the_log_file_only_when_there_is_one(tmp_path):
    from hpcfutures._cli.verdict import failure_pointer as _failure_pointer

    environ = {"HPCFUTURES_LOG_DIR": str(tmp_path)}
    log = tmp_path / "run-abc" / "rank-2-worker.log"
    log.parent.mkdir()
    log.write_text("x")
    assert _failure_pointer(2, 1, 4, 1, "abc", environ) == (
        f"hpcfutures run: rank 2 (worker) failed first, exit status 1; read {log}")
    assert "killed by SIGKILL" in _failure_pointer(0, -9, 4, 1, "abc", environ)
    assert "wrote no" in _failure_pointer(3, 1, 4, 1, "abc", environ)
    assert "not shared with this node" in _failure_pointer(3, 1, 4, 1, "abc", environ)
    assert "[rank 1 client]" in _failure_pointer(1, 1, 4, 1, "abc", {})


def test_run_blames_the_client_not_the_ranks_that_followed_its_verdict():
    from hpcfutures._cli.verdict import failed_first as _failed_first

    # the client (rank 1) raised: the others left with its status 1, some before it
    assert _failed_first([2, 0, 3, 1], [1, 1, 1, 1], client=1, ended_by_us=set()) == 1
    # a worker killed first, then the client broke: the worker
    assert _failed_first([3, 1, 0, 2], [1, 1, 1, -9], client=1, ended_by_us=set()) == 3
    # the client succeeded, a worker failed on its own
    assert _failed_first([2, 1, 0, 3], [0, 0, 3, 0], client=1, ended_by_us=set()) == 2
    # a straggler we ended is never the culprit
    assert _failed_first([1, 0, 2], [2, 2, -15], client=1, ended_by_us={2}) == 1


def test_dask_noise_of_a_stopping_launch_is_dropped_and_real_trouble_kept():
    import logging

    from hpcfutures._support.logs import quiet_dask_logging

    quiet_dask_logging({})

    def shown(name: str, message: str, *args: object) -> bool:
        logger = logging.getLogger(name)
        record = logger.makeRecord(name, logging.WARNING, "x", 1, message, args, None)
        return all(f.filter(record) if hasattr(f, "filter") else f(record)
                   for f in logger.filters)

    assert not shown("distributed.worker.state_machine",
                     "Async instruction for <Task cancelled name='execute(x)'> ended with "
                     "CancelledError")
    assert shown("distributed.worker.state_machine",
                 "Unhandled exception in async instruction for <Task>")
    assert not shown("distributed.worker", "failed during get data with %s -> %s",
                     "tls://10.77.0.13:36579", None)
    assert shown("distributed.worker", "Unexpected error in get_data")
    handshake = "Listener on %r: TLS handshake failed with remote %r: %s"
    assert not shown("distributed.comm.tcp", handshake, "tls://a:1", "tls://b:2",
                     "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of "
                     "protocol (_ssl.c:1006)")
    assert not shown("distributed.comm.tcp", handshake, "tls://a:1", "tls://b:2",
                     "[Errno 104] Connection reset by peer")  # 100 lines at 2,000 ranks
    assert shown("distributed.comm.tcp", handshake, "tls://a:1", "tls://b:2",
                 "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")


def test_a_client_stopped_by_sigterm_silences_dask_but_still_says_why():
    """Seen in CI: right after SIGTERM, a result the client was fetching from a closing
    worker made Dask log a traceback ('Unexpected error while collecting tasks')."""
    import logging
    import signal
    from types import SimpleNamespace

    from hpcfutures._launch.client_side import ClientSide

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    # Dask's configuration gives some children a level of their own, which the
    # roots' level does not reach (seen in CI: distributed.client logged an error).
    names = ("distributed", "tornado", "distributed.client", "tornado.application")
    before = {name: logging.getLogger(name).level for name in names}
    keep = Keep(logging.WARNING)
    logging.getLogger("hpcfutures").addHandler(keep)
    try:
        ClientSide._on_sigterm(SimpleNamespace(bridge=None), signal.SIGTERM)  # type: ignore[arg-type]
        assert any("the client received SIGTERM" in line for line in said), said
        assert not logging.getLogger("distributed.utils_comm").isEnabledFor(logging.ERROR)
        assert not logging.getLogger("tornado.general").isEnabledFor(logging.ERROR)
        assert not logging.getLogger("distributed.client").isEnabledFor(logging.ERROR)
        assert not logging.getLogger("tornado.application").isEnabledFor(logging.ERROR)
        assert logging.getLogger("hpcfutures").isEnabledFor(logging.WARNING)
    finally:
        logging.getLogger("hpcfutures").removeHandler(keep)
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


def test_a_launch_after_one_that_ended_silenced_hears_dask_again():
    """quiet_for_shutdown silences the loggers to which Dask gives levels of their own
    (distributed.client, tornado.application); the next launch in the same process
    (a second executor after a Ctrl-C'd first) gets Dask's levels back."""
    import logging

    from hpcfutures._support.logs import (
        dask_silenced,
        quiet_dask_logging,
        quiet_for_shutdown,
        shutting_down,
    )

    quiet_dask_logging({})
    levels = {name: logging.getLogger(name).level
              for name in ("distributed.client", "tornado.application")}
    assert levels == {"distributed.client": logging.WARNING,
                      "tornado.application": logging.ERROR}  # Dask's own
    quiet_for_shutdown()
    assert not logging.getLogger("distributed.client").isEnabledFor(logging.ERROR)
    assert shutting_down()
    with dask_silenced():  # a moment's silence ending after the shutdown began keeps it
        pass
    assert not logging.getLogger("distributed.client").isEnabledFor(logging.ERROR)
    quiet_dask_logging({})
    assert not shutting_down()
    assert {name: logging.getLogger(name).level for name in levels} == levels
    assert logging.getLogger("distributed.client").isEnabledFor(logging.ERROR)
    assert logging.getLogger("tornado.application").isEnabledFor(logging.ERROR)


def test_a_given_up_tls_connect_that_its_peer_then_closes_prints_no_traceback():
    """Tornado before 6.6 raised CancelledError out of its own close here, and asyncio
    printed the traceback (seen on a node whose link came back mid-launch)."""
    import asyncio
    import logging
    import socket
    import ssl

    from tornado.iostream import IOStream

    from hpcfutures._support.logs import quiet_dask_logging

    quiet_dask_logging({})
    reports: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reports.append(record)

    async def give_up_a_handshake_then_hear_the_peer_close() -> None:
        ours, peer = socket.socketpair()
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        handshake = IOStream(ours).start_tls(False, context)
        await asyncio.sleep(0)
        handshake.cancel()
        peer.close()
        for _ in range(50):  # until the loop has read the peer's EOF and closed
            await asyncio.sleep(0.01)
        ours.close()

    keep = Keep()
    logging.getLogger("asyncio").addHandler(keep)
    try:
        asyncio.run(give_up_a_handshake_then_hear_the_peer_close())
    finally:
        logging.getLogger("asyncio").removeHandler(keep)
    assert [r.getMessage() for r in reports] == []


def test_roster_names_workers_that_leave_but_not_at_the_end(caplog):
    import asyncio

    from hpcfutures._dask import WorkerChanges
    from hpcfutures._facade.core.roster import WorkerRoster

    changes = WorkerChanges()

    class Scheduler:
        async def hpcfutures_worker_changes(self, start):
            return changes.since(start)

    client = type("Client", (), {"scheduler": Scheduler()})()
    roster = WorkerRoster()
    roster.pointer = lambda name: (f"rank {name[5:]} (worker)", f"read {name}.log")
    changes.events += [("+", "a", "rank-2", None), ("+", "b", "rank-3", None)]
    asyncio.run(roster.refresh(client, lambda: False))
    changes.left("a")
    asyncio.run(roster.refresh(client, lambda: False))
    assert "rank 2 (worker) left the launch before the end" in caplog.text
    assert roster.describe_lost() == "lost rank 2 (worker): read rank-2.log"
    changes.left("b")
    asyncio.run(roster.refresh(client, lambda: True))  # the launch is ending: no warning
    assert "rank 3" not in caplog.text and roster.lost == ["rank-2"]


def test_workers_leaving_a_few_at_a_time_are_one_line_and_a_summary(caplog, monkeypatch):
    """A wave the client hears of over several questions (a node's 32 workers over a
    few seconds) is one line for the first worker and one summary, not a line each."""
    import asyncio

    from hpcfutures._dask import WorkerChanges
    from hpcfutures._facade.core.roster import WorkerRoster
    from hpcfutures._support import waves

    monkeypatch.setattr(waves, "WAVE_WINDOW", 0.2)
    changes = WorkerChanges()

    class Scheduler:
        async def hpcfutures_worker_changes(self, start):
            return changes.since(start)

    client = type("Client", (), {"scheduler": Scheduler()})()

    async def scenario() -> None:
        roster = WorkerRoster()
        roster.pointer = lambda name: (f"rank {name[5:]} (worker)", f"read {name}.log")
        changes.events += [("+", f"w{i}", f"rank-{i + 2}", None) for i in range(8)]
        await roster.refresh(client, lambda: False)
        roster.hosts.update({f"rank-{i + 2}": "node1" for i in range(8)})
        for pair in range(4):
            changes.left(f"w{2 * pair}")
            changes.left(f"w{2 * pair + 1}")
            await roster.refresh(client, lambda: False)
        await asyncio.sleep(0.6)
        assert roster.lost == [f"rank-{i + 2}" for i in range(8)]

    with caplog.at_level(logging.WARNING, logger="hpcfutures"):
        asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 2, said
    assert said[0].startswith("rank 2 (worker) left the launch before the end (on node1;")
    assert said[1].startswith("7 more workers left the launch before the end within "), said
    assert "7 on node1; the first few: rank 3 (worker) left" in said[1], said


# ------------------------------------------------------ progress, in process
@pytest.fixture(scope="module")
def ex():
    executor = hpcfutures.LocalExecutor(2, timeout=60)
    yield executor
    executor.shutdown()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_always_draws_into_a_captured_stream(ex, capsys):
    needs("tqdm")
    assert list(ex.map(square, range(50), progress="always")) == [x * x for x in range(50)]
    err = capsys.readouterr().err
    assert "square" in err and "50/50" in err, err


def test_progress_true_writes_nothing_when_stderr_is_not_a_terminal(ex, capsys):
    needs("tqdm")
    assert list(ex.map(square, range(50), progress=True)) == [x * x for x in range(50)]
    assert capsys.readouterr().err == ""


def test_progress_true_draws_on_a_terminal(ex, monkeypatch):
    needs("tqdm")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(ex.map(square, range(30), chunksize=4, progress=True)) == [
        x * x for x in range(30)]
    assert "30/30" in terminal.getvalue()


def test_progress_keeps_order_timeout_and_the_exception_position(ex, capsys):
    needs("tqdm")
    seen = []
    with pytest.raises(ValueError, match="bad item 7"):
        for value in ex.map(fail_on, range(20), [7] * 20, progress="always"):
            seen.append(value)
    assert seen == list(range(7))
    from contract import sleep_then

    results = ex.map(sleep_then, [0.0, 2.0], ["first", "late"], timeout=0.5, progress="always")
    assert next(results) == "first"
    with pytest.raises(TimeoutError):
        next(results)
    results.close()
    capsys.readouterr()


def test_progress_without_tqdm_is_a_clear_error(ex, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # what an environment without it sees
    with pytest.raises(hpcfutures.MissingDependencyError, match="pip install tqdm"):
        ex.map(square, range(3), progress=True)
    with pytest.raises(ImportError):
        ex.map(square, range(3), progress="always")
    assert list(ex.map(square, range(3))) == [0, 1, 4]  # off: no tqdm needed
    with pytest.raises(ValueError, match="progress"):
        ex.map(square, range(3), progress="sometimes")


def test_progress_off_never_imports_tqdm():
    code = ("import sys, hpcfutures\n"
            "with hpcfutures.LocalExecutor(1) as ex:\n"
            "    assert list(ex.map(abs, range(-50, 0))) == list(range(50, 0, -1))\n"
            "assert 'tqdm' not in sys.modules, 'tqdm was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=90, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


# ------------------------------------------------------- summary, in process
def test_summary_counts_user_calls_not_dask_tasks(capsys):
    from contract import raise_custom

    with hpcfutures.LocalExecutor(2, summary=True) as executor:
        assert sum(executor.map(square, range(300))) == sum(x * x for x in range(300))
        futures = [executor.submit(square, x) for x in range(20)]
        failing = executor.submit(raise_custom)
        assert [f.result(timeout=30) for f in futures] == [x * x for x in range(20)]
        assert isinstance(failing.exception(timeout=30), CustomError)
    err = capsys.readouterr().err
    head, _, *rows, total = err.strip().splitlines()
    assert head.startswith("hpcfutures summary: 321 calls run, 1 failed; wall time"), err
    # a worker that joined after the work was done (a busy machine) may be missing
    assert {row.split()[0] for row in rows} <= {"local-0", "local-1"} and rows, err
    assert sum(int(row.split()[2]) for row in rows) == 321, err
    assert total.split()[0] == "all" and total.split()[4] == "321", err


# --------------------------------------------------- under hpcfutures run
def _start(n: int, mode: str, env: dict) -> tuple[subprocess.Popen, str]:
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "run", "-n", str(n), sys.executable, str(MONITOR),
         mode],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: marker, **env})
    return process, marker


@pytest.mark.timeout(120)
def test_dashboard_line_has_a_loopback_address_that_answers_and_summary_names_ranks(tmp_path):
    needs("bokeh")
    release = tmp_path / "release"
    process, marker = _start(4, "watch", {
        "HPCFUTURES_DASHBOARD": "1", "HPCFUTURES_DASHBOARD_ADDRESS": "127.0.0.1:0",
        "HPCFUTURES_SUMMARY": "1", "MONITOR_RELEASE": str(release)})
    stdout, stderr = Lines(process.stdout), Lines(process.stderr)
    try:
        line = stderr.wait_for("Dask dashboard at", timeout=60)
        url = re.search(r"(http://127\.0\.0\.1:\d+/status)", line).group(1)
        port = url.split(":")[2].split("/")[0]
        assert f"ssh -L {port}:127.0.0.1:{port} " in line
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
            assert b"bokeh" in answer.read().lower()
        release.touch()
        process.wait(timeout=60)
    finally:
        release.touch()
        if process.poll() is None:
            process.kill()
    out, err = stdout.rest(), stderr.rest()
    assert process.returncode == 0, (out, err)
    assert "MAPPED" in out
    assert err.count("Dask dashboard at") == 1, err
    summary = err[err.index("hpcfutures summary"):]
    assert "60 calls run, 0 failed" in summary, err
    # the client's rows, tagged by hpcfutures run
    assert re.search(r"^\[rank 1 client\]\s+rank-2\s", summary, re.M), err
    assert re.search(r"^\[rank 1 client\]\s+rank-3\s", summary, re.M), err
    assert_no_leftovers(marker)


@pytest.mark.timeout(90)
def test_dashboard_without_bokeh_warns_once_and_runs():
    code = ("import sys\n"
            "sys.modules['bokeh'] = None  # as if bokeh were not installed\n"
            "import hpcfutures\n"
            "with hpcfutures.LocalExecutor(1, dashboard=True, dashboard_address='127.0.0.1:0')"
            " as ex:\n"
            "    print(ex.submit(abs, -3).result())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=80, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert done.stderr.count("pip install bokeh") == 1, done.stderr
    assert "Dask dashboard at" not in done.stderr


@pytest.mark.timeout(120)
def test_a_failing_run_points_at_the_rank_and_its_log_file(tmp_path):
    job = hpcfutures_run(4, MONITOR, "losing", timeout=90,
                         env={"HPCFUTURES_LOG_DIR": str(tmp_path)})
    assert "RESULTS OK" in job.stdout, job
    assert job.returncode == 0, job  # the client's status: it got every result
    (launch_dir,) = tmp_path.iterdir()
    log = launch_dir / "rank-2-worker.log"
    assert log.exists()
    last = job.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "hpcfutures run: rank 2 (worker) was killed by a call, exit status 3; the client "
        f"carried on and ended well; read {log}; "), last
    # ... and, as the rank died running a call, which call
    assert "exited with status 3 running __main__.die_on_rank_2" in last, last
    # the client also named the lost worker, and where to read about it
    assert "rank 2 (worker) left the launch before the end" in job.stderr, job
    assert job.stderr.count(str(log)) == 2


@pytest.mark.timeout(90)
def test_a_dead_scheduler_is_named_with_its_log_file(tmp_path):
    env = {"HPCFUTURES_LOG_DIR": str(tmp_path), "HPCFUTURES_TIMEOUT": "20"}
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "run", "-n", "3", "--grace", "2", sys.executable,
         str(JOBS / "block_job.py")],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: marker, **env})
    stdout, stderr = Lines(process.stdout), Lines(process.stderr)
    try:
        stdout.wait_for("READY", timeout=60)
        os.kill(rank_pid(marker, 0), 9)
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
    out, err = stdout.rest(), stderr.rest()
    (launch_dir,) = tmp_path.iterdir()
    log = launch_dir / "rank-0-scheduler.log"
    assert "CLIENT SAW BrokenHPCExecutor" in out, (out, err)
    assert f"rank 0 (scheduler) probably died; read {log}" in err, err
    assert f"hpcfutures run: rank 0 (scheduler) failed first, killed by SIGKILL; read {log}" in err
    assert_no_leftovers(marker)



def test_dask_noise_of_a_lost_worker_is_dropped_the_client_and_worker_say_it():
    """The client names a lost worker and says its tasks run again; the lost worker
    says in one line that it lost the scheduler: Dask's versions add nothing."""
    import logging

    from hpcfutures._support.logs import quiet_dask_logging

    quiet_dask_logging({})

    def shown(name: str, message: str) -> bool:
        logger = logging.getLogger(name)
        record = logger.makeRecord(name, logging.WARNING, "x", 1, message, (), None)
        return all(f.filter(record) if hasattr(f, "filter") else f(record)
                   for f in logger.filters)

    assert not shown("distributed.scheduler",
                     "Removing worker 'tls://10.77.0.13:36747' caused the cluster to lose "
                     "already computed task(s), which will be recomputed elsewhere: {'a'}")
    assert not shown("distributed.worker", "Failed to communicate with scheduler during "
                                           "heartbeat.")
    assert not shown("distributed.scheduler", "Workers ['tls://127.0.0.1:39565'] do not use a "
                     "nanny and will be terminated without restarting them")
    assert not shown("distributed.scheduler",
                     "Closed comm <BatchedSend: closed> while trying to write [{'op': 'event', "
                     "'topic': 'hpcfutures-cluster'}]")
    assert not shown("asyncio", "Task exception was never retrieved\nfuture: <Task finished "
                                "name='Task-27' coro=<Client._gather.<locals>.wait() done, "
                                "defined at /x/distributed/client.py:2367> exception=AllExit()>")
    assert shown("asyncio", "Task exception was never retrieved\nfuture: <Task finished "
                            "name='Task-3' coro=<mine() done> exception=ValueError()>")
    assert shown("distributed.scheduler", "Worker failed to heartbeat for 20s; removing: <W>")
    assert shown("distributed.worker", "Worker is at 90% memory usage. Pausing worker.")
