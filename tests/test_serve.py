"""Serving launches (``hpcfutures serve``) and clients that connect from outside them.

The launch runs in the background (``hpcfutures run`` here, ``sbatch`` + ``srun``
on the local Slurm); clients are separate processes, as a notebook or a login
node would be.  Error messages are checked in this process against files
written by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    JOBS,
    MARKER_VAR,
    MPI_LOOPBACK,
    ROOT,
    Batch,
    assert_no_leftovers,
    child_pids,
    closed_port,
    have_mpi,
    outsiders_refused,
    require,
    run_job,
    slurm_is_up,
    wait_until,
)
from pace import scaled

import hpcfutures
from hpcfutures._launch.roles import Role, assign_serving_role
from hpcfutures._launch.serving import serving_plan
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import SchedulerInfo
from hpcfutures.launchers._schedfile import SchedulerFileExchange

CONNECT_JOB = "tests/jobs/connect_job.py"


# ------------------------------------------------------------------ helpers
def write_info(path: Path, **fields) -> SchedulerInfo:
    """A scheduler file as a serving launch (or something else) would have left it."""
    info = SchedulerInfo(**{"address": "tcp://127.0.0.1:1", "launch_id": "local-x",
                            "serving": True, **fields})
    path.write_text(info.to_json())
    path.chmod(0o600)
    return info


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 60) -> dict:
    """The published (not finished) content of ``path``, once it appears."""
    def published() -> dict | None:
        if process.poll() is not None:
            pytest.fail(f"the serving launch ended early: {process.returncode}")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return None if data.get("finished") else data

    return wait_until(published, timeout, f"a published scheduler file at {path}")


class Serving:
    """``hpcfutures run -n N hpcfutures serve`` (or ``mpiexec``) in the background."""

    def __init__(self, tmp_path: Path, n: int = 3, *extra: str, env: dict | None = None,
                 launcher: str = "run"):
        self.marker = uuid.uuid4().hex
        self.file = tmp_path / "serve.json"
        self.log = tmp_path / "serve.log"
        start = ([sys.executable, "-m", "hpcfutures", "run", "-n", str(n)] if launcher == "run"
                 else ["mpiexec", "-n", str(n)])
        command = [*start, sys.executable, "-m", "hpcfutures", "serve",
                   "--scheduler-file", str(self.file), *extra]
        # The workers import the clients' functions by module name (tests/contract.py),
        # as a user's job has their modules on its PYTHONPATH.
        full_env = {**os.environ, "HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60",
                    "PYTHONPATH": os.pathsep.join(filter(None, [
                        str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
                    **(env or {}), MARKER_VAR: self.marker}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, env=full_env, cwd=ROOT, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def published(self) -> dict:
        return wait_for_file(self.file, self.process)

    def joined(self, ranks: set[int], timeout: float = 60) -> None:
        """Wait until each worker rank in ``ranks`` has registered with the scheduler.

        Dask's worker logs "Registered to: <scheduler>" at INFO, so the launch
        must run with HPCFUTURES_DASK_LOG_LEVEL=INFO; hpcfutures tags the line
        with the rank.
        """
        def registered() -> set[int]:
            return {int(rank) for rank in
                    re.findall(r"\[rank (\d+) worker\].*Registered to:", self.output())}

        wait_until(registered, timeout, f"worker ranks {sorted(ranks)} joining the scheduler",
                   done=lambda seen: ranks <= seen, details=self.output)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the serving launch still runs {timeout} s later:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        print(self.output())  # shown when the test failed
        assert_no_leftovers(self.marker, grace=15)


@pytest.fixture
def serving(tmp_path):
    launches = []

    def start(*args, **kwargs) -> Serving:
        launches.append(Serving(tmp_path, *args, **kwargs))
        return launches[-1]

    yield start
    for launch in launches:
        launch.close()


def client(*actions, file, timeout=240, env=None):
    return run_job([sys.executable, CONNECT_JOB, str(file), *actions], timeout=timeout,
                   env=env)


def connect_passed(job) -> bool:
    return (job.returncode == 0 and "CONNECT RESULT failed=0" in job.stdout
            and "FAIL " not in job.stdout)


# ------------------------------------------------- a serving launch, for real
@pytest.mark.timeout(300)
def test_connect_run_the_contract_reconnect_and_stop(serving):
    launch = serving(3)
    launch.published()
    job = client("contract", "quick", "stop", file=launch.file)
    assert connect_passed(job), job
    status = launch.wait(30)
    out = launch.output()
    assert status == 0, out
    assert "stopping: hpcfutures stop" in out, out
    marker = json.loads(launch.file.read_text())
    assert marker["finished"] and not marker["security"] and not marker["address"], marker
    assert launch.file.stat().st_mode & 0o777 == 0o600
    assert_no_leftovers(launch.marker, grace=10)


@pytest.mark.timeout(180)
def test_a_call_that_kills_its_worker_fails_alone_on_a_serving_launch(serving):
    """One recovery policy on every launch: Dask does not retry the call on the next
    worker (it would kill every worker of the launch, one after the other); the client
    fails it with WorkerCrashError from the dead worker's certificate.  The worker is
    rank 1, which hpcfutures run must not take for a client: the launch serves on, and
    ends with status 0 when stopped."""
    launch = serving(4)
    launch.published()
    job = client("crash", "quick", "stop", file=launch.file, env={"CONNECT_WORKERS": "3"})
    assert connect_passed(job), job
    assert "workers 3 -> 2" in job.stdout, job
    assert launch.wait(30) == 0, launch.output()
    assert "rank 1 (worker) was killed by a call, exit status 3; the launch served on" in (
        launch.output()), launch.output()


@pytest.mark.timeout(120)
def test_leaving_keeps_serving_and_the_cli_stops_it(serving):
    launch = serving(3)
    launch.published()
    assert connect_passed(client("quick", file=launch.file))
    assert connect_passed(client("quick", file=launch.file)), "a second client was refused"
    assert launch.process.poll() is None, "a client leaving stopped the launch"
    done = run_job([sys.executable, "-m", "hpcfutures", "stop", str(launch.file)], timeout=60)
    assert done.returncode == 0 and "has stopped" in done.stdout, done
    assert launch.wait(30) == 0, launch.output()
    late = run_job([sys.executable, "-m", "hpcfutures", "stop", str(launch.file)], timeout=60)
    assert late.returncode == 1 and "stopped at" in late.stderr, late


@pytest.mark.timeout(120)
def test_sigterm_stops_every_rank_with_status_0(serving):
    launch = serving(4, env={"HPCFUTURES_DASK_LOG_LEVEL": "INFO"})  # workers say they joined
    launch.published()
    launch.joined({1, 2, 3})  # the workers too must exit 0 on the signal
    os.killpg(launch.process.pid, signal.SIGTERM)
    assert launch.wait(30) == 0, launch.output()
    assert "received SIGTERM" in launch.output()
    assert json.loads(launch.file.read_text())["finished"]


@pytest.mark.timeout(120)
def test_a_sigterm_repeated_until_the_end_still_ends_every_rank_with_status_0(serving):
    """A stop comes more than once: the job's process group gets it and the launcher
    forwards its own (``scancel`` and ``srun``; ``kill`` and ``hpcfutures run``).  A
    copy that lands while a rank leaves must not turn its clean exit into a death."""
    launch = serving(4, env={"HPCFUTURES_DASK_LOG_LEVEL": "INFO"})
    launch.published()
    launch.joined({1, 2, 3})
    # pidfds: a rank's pid, once it has ended, may be another process's.
    ranks = [os.pidfd_open(pid) for pid in child_pids(launch.process.pid)]
    assert len(ranks) == 4, "not one process per rank under hpcfutures run"
    try:
        os.killpg(launch.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while launch.process.poll() is None and time.monotonic() < deadline:
            for rank in ranks:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(rank, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                launch.process.wait(0.002)  # the next copy of the signal in 2 ms
    finally:
        for rank in ranks:
            os.close(rank)
    assert launch.wait(30) == 0, launch.output()
    assert json.loads(launch.file.read_text())["finished"]


@pytest.mark.timeout(120)
def test_one_process_serves_alone_and_stops_when_idle(tmp_path):
    file = tmp_path / "alone.json"
    job = run_job([sys.executable, "-m", "hpcfutures", "serve", "--scheduler-file", str(file),
                   "--idle-timeout", "3"],
                  env={"HPCFUTURES_MAX_WORKERS": "1", "HPCFUTURES_HOST": "127.0.0.1"},
                  timeout=60)
    assert job.returncode == 0, job
    assert "idle timeout" in job.stderr, job
    assert json.loads(file.read_text())["finished"]


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_serving_under_mpiexec(serving):
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    launch = serving(3, launcher="mpiexec", env=MPI_LOOPBACK)
    launch.published()
    job = client("quick", "quick", "stop", file=launch.file)
    assert connect_passed(job), job
    assert launch.wait(30) == 0, launch.output()
    assert json.loads(launch.file.read_text())["finished"]


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_a_worker_rank_that_comes_after_the_stop_leaves_and_mpiexec_returns_0(serving):
    """A serving launch under mpiexec whose rank 2 joins only after the launch was
    stopped (held back at its join): it reads the stopped marker in the scheduler file,
    leaves, the ranks end MPI together and mpiexec returns 0.  Before, the worker took
    the closed scheduler for a dead one and left through the error, into MPI_Finalize,
    while the other ranks waited for it to arrive at the end: the launch stalled for
    its timeout, and then the others aborted the job with a failure status."""
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    launch = serving(3, launcher="mpiexec", env={
        **MPI_LOOPBACK, "HPCFUTURES_DASK_LOG_LEVEL": "INFO",
        "DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{JOBS / "slow_join.py"}"]',
        "HPCFUTURES_TEST_SLOW_RANK": "2", "HPCFUTURES_TEST_SLOW_JOIN": f"{scaled(8):g}"})
    launch.published()
    launch.joined({1})
    job = client("quick", "stop", file=launch.file)
    assert connect_passed(job), job
    assert launch.wait(scaled(40)) == 0, launch.output()
    assert not re.search(r"\[rank 2 worker\].*Registered to:", launch.output()), (
        "rank 2 joined before the stop, so the case was not made:\n" + launch.output())
    assert "probably died" not in launch.output(), launch.output()


# ------------------------------------------------------------ outsiders


@pytest.mark.timeout(180)
def test_without_the_files_credentials_nobody_gets_in(serving, tmp_path):
    launch = serving(3)
    address = launch.published()["address"]
    assert address.startswith("tls://127.0.0.1:"), address
    # Without credentials, over plain TCP, with someone else's certificate.
    assert outsiders_refused([(address, "none"), (address.replace("tls://", "tcp://"), "none"),
                              (address, "other")]) == [True, True, True]
    # A copy others could read is refused by connect(), before any connection.
    leaked = tmp_path / "leaked.json"
    leaked.write_text(launch.file.read_text())
    leaked.chmod(0o644)
    with pytest.raises(hpcfutures.SchedulerFileError, match="other users could read"):
        hpcfutures.connect(leaked)
    # The file's own owner still gets in, and the launch was never disturbed.
    assert connect_passed(client("quick", "stopfile", file=launch.file))
    assert launch.wait(30) == 0, launch.output()



@pytest.mark.timeout(120)
def test_calls_fail_at_once_when_the_scheduler_dies_even_those_submitted_after(serving):
    """The scheduler's process dies while nothing runs (Dask then has no future to
    cancel): a call submitted afterwards fails at once with BrokenHPCExecutor.  Before,
    Dask held it for a reconnection that never came, and it waited the client's whole
    timeout (seen in CI: an allocation cancelled as a call was sent, 60 s lost)."""
    launch = serving(3)
    pid = launch.published()["pid"]
    with hpcfutures.connect(launch.file, timeout=60) as ex:
        assert ex.submit(abs, -1).result(timeout=60) == 1
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, "the scheduler to die")
        started = time.monotonic()
        with pytest.raises(hpcfutures.BrokenHPCExecutor, match="connection to the scheduler"):
            ex.submit(abs, -2).result(timeout=30)
        assert time.monotonic() - started < scaled(5)

# ------------------------------------------------------ clear error messages
def test_missing_file_says_to_start_serve_and_where(tmp_path):
    path = tmp_path / "nothing.json"
    with pytest.raises(hpcfutures.NotServingError) as caught:
        hpcfutures.connect(path)
    message = str(caught.value)
    assert f"no scheduler file at {path}" in message
    assert f"hpcfutures serve --scheduler-file {path}" in message
    assert isinstance(caught.value, ConnectionError)


def test_missing_file_is_awaited_with_wait(tmp_path):
    started = time.monotonic()
    with pytest.raises(hpcfutures.NotServingError, match="no scheduler file"):
        hpcfutures.connect(tmp_path / "later.json", wait=0.5)
    assert 0.5 <= time.monotonic() - started < scaled(5)


def test_stopped_launch_is_reported_as_stopped(tmp_path):
    path = tmp_path / "done.json"
    write_info(path, address="", launch_id="slurm-7.0", finished=True)
    with pytest.raises(hpcfutures.NotServingError, match=r"slurm-7\.0\) stopped at"):
        hpcfutures.connect(path)
    with pytest.raises(hpcfutures.NotServingError, match="stopped at"):
        hpcfutures.stop(path)


def test_nobody_answering_means_the_job_probably_ended(tmp_path):
    path = tmp_path / "stale.json"
    write_info(path, address=f"tcp://127.0.0.1:{closed_port()}", host="elsewhere")
    with pytest.raises(hpcfutures.NotServingError, match=r"nobody answers.*probably ended"):
        hpcfutures.connect(path, timeout=2)
    with pytest.raises(hpcfutures.NotServingError, match=r"nobody answers.*probably ended"):
        hpcfutures.stop(path, timeout=2)


def test_a_dead_scheduler_on_this_host_is_reported_without_waiting(tmp_path):
    path = tmp_path / "dead.json"
    pid = dead_pid()
    write_info(path, pid=pid)
    started = time.monotonic()
    with pytest.raises(hpcfutures.NotServingError, match=f"process {pid} is gone"):
        hpcfutures.connect(path)
    assert time.monotonic() - started < scaled(5)


def test_a_launch_with_its_own_client_cannot_be_joined(tmp_path):
    path = tmp_path / "job.json"
    write_info(path, serving=False)
    with pytest.raises(hpcfutures.NotServingError, match="runs its own client"):
        hpcfutures.connect(path)
    with pytest.raises(hpcfutures.NotServingError, match="runs its own client"):
        hpcfutures.stop(path)


def test_readable_files_are_refused(tmp_path):
    path = tmp_path / "open.json"
    write_info(path)
    path.chmod(0o640)
    with pytest.raises(hpcfutures.SchedulerFileError, match="other users could read"):
        hpcfutures.connect(path)


def test_another_users_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "theirs.json"
    write_info(path)
    owner = path.stat().st_uid
    # Only root can give a file away; seen from another uid, ours is someone else's.
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(hpcfutures.SchedulerFileError, match=f"owned by uid {owner}, not by you"):
        hpcfutures.connect(path)


def test_a_tls_address_without_credentials_is_refused(tmp_path):
    path = tmp_path / "odd.json"
    write_info(path, address="tls://127.0.0.1:1")
    with pytest.raises(hpcfutures.SchedulerFileError, match="no credentials"):
        hpcfutures.connect(path)


def test_wait_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="wait"):
        hpcfutures.connect(tmp_path / "x.json", wait=-1)


# ------------------------------------------------- the scheduler's side, alone
class _FakeScheduler:
    def __init__(self):
        self.handlers, self.client_comms, self.stream_comms = {}, {}, {}
        self.stream_handlers = {}


@pytest.fixture
def dask_log_levels():
    """Ending a launch silences Dask's loggers; give them back to the other tests."""
    import logging

    loggers = [logging.getLogger(name) for name in ("distributed", "tornado")]
    levels = [log.level for log in loggers]
    yield
    for log, level in zip(loggers, levels, strict=True):
        log.setLevel(level)


def test_a_serving_coordinator_outlives_its_clients_until_stopped(dask_log_levels):
    import asyncio

    from hpcfutures._dask import Coordinator

    async def scenario():
        plain = Coordinator()
        await plain.start(_FakeScheduler())
        assert "hpcfutures_stop" not in plain.scheduler.handlers  # only serving launches stop
        serving = Coordinator(keep_serving=True)
        await serving.start(_FakeScheduler())
        for name in ("a", "b"):
            serving.scheduler.handlers["hpcfutures_register"](client=name)
        # A client leaving says so.
        serving.scheduler.stream_handlers["hpcfutures-finish"](status=1, client="a")
        for name in ("a", "b"):
            serving.remove_client(serving.scheduler, name)
        assert not serving.done.is_set(), "a client leaving ended a serving launch"
        assert serving.scheduler.handlers["hpcfutures_stop"](reason="asked by test") == "ok"
        assert await serving.until_stopped() == 0 and serving.reason == "asked by test"

    asyncio.run(scenario())


def test_the_idle_timeout_counts_only_time_without_clients(dask_log_levels):
    import asyncio

    from hpcfutures._dask import Coordinator

    async def scenario():
        coordinator = Coordinator(keep_serving=True)
        await coordinator.start(_FakeScheduler())
        coordinator.scheduler.handlers["hpcfutures_register"](client="a")
        waiting = asyncio.ensure_future(coordinator.until_stopped(idle_timeout=0.3))
        await asyncio.sleep(0.6)  # the behaviour itself: twice the idle timeout passes
        assert not waiting.done(), "the launch went idle while a client was connected"
        coordinator.remove_client(coordinator.scheduler, "a")
        left = time.monotonic()
        assert await asyncio.wait_for(waiting, 5) == 0
        assert time.monotonic() - left >= 0.25 and "idle timeout" in coordinator.reason

    asyncio.run(scenario())


# --------------------------------------------------- roles and the command
def test_serving_roles_have_no_client():
    assert [assign_serving_role(rank, 4) for rank in range(4)] == [
        Role.SCHEDULER, Role.WORKER, Role.WORKER, Role.WORKER]
    assert [assign_serving_role(rank, 2) for rank in range(2)] == [Role.SCHEDULER, Role.WORKER]
    assert assign_serving_role(0, 1) is Role.STANDALONE


def test_serve_publishes_to_the_named_file_and_leaves_a_marker(tmp_path):
    environ = {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "2", "HPCFUTURES_LAUNCH_ID": "abc"}
    settings = resolve_settings({"scheduler_file": str(tmp_path / "s-{job_id}.json")}, environ,
                                {})
    plan = serving_plan(settings, environ)
    assert plan.role is Role.WORKER
    assert isinstance(plan.exchange, SchedulerFileExchange)
    assert plan.exchange.path == tmp_path / "s-abc.json" and plan.exchange.tombstone


def test_serve_needs_a_scheduler_file(capsys):
    from hpcfutures._cli import main

    environ_file = os.environ.pop("HPCFUTURES_SCHEDULER_FILE", None)
    try:
        assert main(["serve"]) == 2
    finally:
        if environ_file is not None:
            os.environ["HPCFUTURES_SCHEDULER_FILE"] = environ_file
    assert "--scheduler-file PATH" in capsys.readouterr().err


def test_stop_command_explains_a_missing_file(tmp_path, capsys):
    from hpcfutures._cli import main

    assert main(["stop", str(tmp_path / "none.json")]) == 1
    assert "no scheduler file at" in capsys.readouterr().err


# ------------------------------------------------------ the real local Slurm
@pytest.mark.slurm
@pytest.mark.timeout(400)
def test_serving_batch_job_on_slurm(tmp_path):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    env = {"HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60"}
    batch = Batch(tmp_path, env)
    try:
        job = batch.submit(
            "export PYTHONPATH=$PWD/tests:$PYTHONPATH\n"  # the clients' modules (contract.py)
            "srun -n4 python3 -m hpcfutures serve "
            f"--scheduler-file {tmp_path}/serve-{{job_id}}.json\n",
            "-n4", "-t", "10", "-o", str(tmp_path / "serve.out"))
        file = tmp_path / f"serve-{job}.json"
        # The client waits for the job to start (CONNECT_WAIT) as a user's would.
        first = client("contract", "quick", file=file, env={"CONNECT_WAIT": "120"},
                       timeout=300)
        assert connect_passed(first), (first, batch.outputs())
        assert batch.wait(job, states={"RUNNING"}, timeout=5)["JobState"] == "RUNNING"
        second = client("quick", "stop", file=file, timeout=120)
        assert connect_passed(second), (second, batch.outputs())
        facts = batch.wait(job, timeout=60)
        out = (tmp_path / "serve.out").read_text()
        assert facts["JobState"] == "COMPLETED" and facts["ExitCode"] == "0:0", (facts, out)
        assert "stopping: hpcfutures stop" in out, out
        assert json.loads(file.read_text())["finished"]
    finally:
        batch.cancel_all()
        print(batch.outputs())
        assert_no_leftovers(batch.marker, grace=15)


# ------------------------------------------------------------------ examples
EXAMPLE = "examples/offload_from_login_node.py"


@pytest.mark.timeout(180)
def test_offload_example_against_a_local_serving_launch(serving):
    launch = serving(3)
    launch.published()
    first = run_job([sys.executable, EXAMPLE, launch.file], timeout=120)
    assert first.returncode == 0 and "pi ~= 3.1" in first.stdout, first
    assert launch.process.poll() is None, "the example stopped the launch without --stop"
    last = run_job([sys.executable, EXAMPLE, launch.file, "--stop"], timeout=120)
    assert last.returncode == 0 and "has stopped" in last.stdout, last
    assert launch.wait(30) == 0, launch.output()


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_serve_job_example_on_slurm(tmp_path):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    env = {"HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60",
           "HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "serve-{job_id}.json")}
    batch = Batch(tmp_path, env)
    try:
        job = batch.submit((ROOT / "examples" / "serve_job.sh").read_text(),
                           "-o", str(tmp_path / "serve.out"))
        file = tmp_path / f"serve-{job}.json"
        ran = run_job([sys.executable, EXAMPLE, file, "--wait", "120", "--stop"], timeout=240)
        assert ran.returncode == 0 and "pi ~= 3.1" in ran.stdout, (ran, batch.outputs())
        facts = batch.wait(job, timeout=60)
        assert facts["JobState"] == "COMPLETED" and facts["ExitCode"] == "0:0", \
            (facts, batch.outputs())
    finally:
        batch.cancel_all()
        print(batch.outputs())
        assert_no_leftovers(batch.marker, grace=15)
