"""``hpcfutures run`` and the local launcher plug-in, for real, in subprocesses."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from helpers import (
    JOBS,
    MARKER_VAR,
    ROOT,
    Lines,
    assert_no_leftovers,
    contract_passed,
    ending_launch,
    ending_passed,
    hpcfutures_run,
    own_lines,
    record_failure_time,
    run_job,
)
from pace import scaled

CONTRACT = JOBS / "contract_job.py"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [3, 4])
def test_contract_under_hpcfutures_run(n):
    job = hpcfutures_run(n, CONTRACT, timeout=150)
    assert contract_passed(job, launcher="run" if n == 4 else None), job


@pytest.mark.timeout(180)
def test_contract_with_scheduler_in_client_on_two_ranks():
    job = hpcfutures_run(2, CONTRACT, timeout=150,
                         env={"HPCFUTURES_SCHEDULER_IN_CLIENT": "1"})
    assert contract_passed(job), job


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["exit", "lost"])
def test_pending_call_runs_when_the_client_never_shuts_down(mode):
    """Issue 15: no shutdown() (program exit, or the executor dropped) loses no call;
    exit: an atexit handler's submit raises RuntimeError."""
    job = hpcfutures_run(3, JOBS / "ending_job.py", mode, timeout=75)
    assert job.returncode == 0, job
    assert "PENDING CALL RAN 49" in job.stdout and f"CLIENT DONE {mode}" in job.stdout, job
    assert ending_passed(job, mode), job


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["cancel", "initfail"])
def test_cancel_futures_and_a_failing_initializer(mode):
    """Issue 15: cancel_futures cancels only calls not started; an initializer that
    raises in a worker joining later breaks the executor, pending calls included."""
    n, env = ending_launch(mode)
    job = hpcfutures_run(n, JOBS / "ending_job.py", mode, timeout=75, env=env)
    assert ending_passed(job, mode), job


@pytest.mark.timeout(60)
def test_client_exception_makes_the_launch_fail_fast():
    job = hpcfutures_run(4, JOBS / "fail_job.py", timeout=45)
    assert job.returncode != 0, job
    assert "RAISING" in job.stdout and "the client failed on purpose" in job.stderr
    assert job.seconds < scaled(10), f"launcher took {job.seconds:.1f} s to return"
    # the verdict names the client, whose status the launch returns, not a rank
    # that only followed the client's verdict
    assert job.returncode == 1, job
    assert "hpcfutures run: rank 1 (client) failed first, exit status 1" in job.stderr, job
    record_failure_time("client code raises: launcher returns", "run", job.seconds)


@pytest.mark.timeout(60)
def test_too_few_ranks_fails_with_a_clear_error():
    job = hpcfutures_run(2, CONTRACT, timeout=45)
    assert job.returncode != 0
    assert "needs at least 3" in job.stderr, job


class _Rank:
    """One copy of a launch started by hand (so the test chooses the launch id),
    whose stderr is read line by line as it comes."""

    def __init__(self, rank: int, size: int, launch_id: str, env: dict, marker: str):
        self.process = subprocess.Popen(
            [sys.executable, str(CONTRACT)], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env, MARKER_VAR: marker,
                 "HPCFUTURES_RANK": str(rank), "HPCFUTURES_SIZE": str(size),
                 "HPCFUTURES_LAUNCH_ID": launch_id})
        self.out, self.err = Lines(self.process.stdout), Lines(self.process.stderr)

    def wait_for(self, text: str, timeout: float) -> None:
        self.err.wait_for(text, timeout)

    def finish(self, timeout: float) -> tuple[int, str]:
        self.process.wait(timeout)
        return self.process.returncode, self.out.rest(timeout)


@pytest.mark.timeout(120)
def test_stale_scheduler_file_with_same_launch_id_is_ignored(tmp_path):
    """A file left by an earlier run (same id, dead address) must not stop this one."""
    launch, marker = "stale-test", uuid.uuid4().hex
    path = tmp_path / "sched.json"
    stale = {"hpcfutures": 1, "address": "tcp://127.0.0.1:9", "launch_id": f"run-{launch}",
             "nonce": "old", "host": "some-other-host", "pid": 1, "created": 0,
             "security": {}, "finished": False}
    path.write_text(json.dumps(stale))
    os.chmod(path, 0o600)
    env = {"HPCFUTURES_SCHEDULER_FILE": str(path), "HPCFUTURES_TIMEOUT": "40",
           "CONTRACT_LOG_INFO": "1", "CONTRACT_CHECKS": "submit_returns_a_real_future"}
    ranks = {}
    try:
        # The client starts first and finds only the stale file...
        ranks[1] = _Rank(1, 3, launch, env, marker)
        ranks[1].wait_for("treating it as stale", timeout=60)
        # ...then the real scheduler and a worker appear.
        ranks[0] = _Rank(0, 3, launch, env, marker)
        ranks[2] = _Rank(2, 3, launch, env, marker)
        results = {rank: r.finish(timeout=90) for rank, r in ranks.items()}
    finally:
        for r in ranks.values():
            if r.process.poll() is None:
                r.process.kill()
    assert {rank: code for rank, (code, _) in results.items()} == {0: 0, 1: 0, 2: 0}, results
    assert "CONTRACT RESULT" in results[1][1] and "FAIL " not in results[1][1]
    assert_no_leftovers(marker)


@pytest.mark.timeout(60)
def test_worker_that_never_finds_a_scheduler_times_out_clearly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPCFUTURES_RANK": "2", "HPCFUTURES_SIZE": "3",
           "HPCFUTURES_LAUNCH_ID": "lonely", "HPCFUTURES_TIMEOUT": "2",
           "HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "never.json")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(CONTRACT)], env=env, capture_output=True,
                          text=True, timeout=45)
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert "StartupTimeoutError" in done.stderr
    assert "never.json" in done.stderr and "rank 2" in done.stderr and "2 s" in done.stderr
    assert elapsed < scaled(15)
    record_failure_time("scheduler never appears (timeout=2)", "run", elapsed)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_forwards_signals_and_everything_stops(signum):
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "run", "-n", "3", sys.executable,
         str(JOBS / "block_job.py")],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: marker})
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        out.wait_for("READY", timeout=40)
        started = time.monotonic()
        process.send_signal(signum)
        process.wait(30)
        out.rest(30)  # every copy has closed the pipes: all have ended
        err.rest(30)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0, (out.text(), err.text())
    # A copy that outlives the signal is ended after the grace period, which the run's
    # stderr names ("rank(s) ... still running"): shown, to tell which one held on.
    assert elapsed < scaled(10), f"stopping took {elapsed:.1f} s\n{err.text()}"
    record_failure_time(f"{signal.Signals(signum).name} to the launch", "run", elapsed)
    assert_no_leftovers(marker)


@pytest.mark.timeout(60)
def test_run_reports_a_failed_copy_and_ends_stragglers():
    code = ("import os, sys, time\n"
            "rank = int(os.environ['HPCFUTURES_RANK'])\n"
            "if rank == 0: time.sleep(300)\n"  # a straggler: run must end it
            "sys.exit(3 if rank == 2 else 0)\n")
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "3", "--grace", "1",
                   sys.executable, "-c", code], timeout=30)
    assert job.returncode != 0
    assert job.seconds < scaled(10)
    assert "still running" in job.stderr


@pytest.mark.timeout(90)
def test_run_ends_a_worker_still_starting_after_the_client_without_failing_the_launch():
    """On an oversubscribed node a short launch can end while a worker copy is still
    importing Python: ending it after the grace loses nothing, so the launch's status
    stays the client's (0), and the line that says so names it as still starting."""
    code = ("import os, time, hpcfutures\n"
            "if os.environ['HPCFUTURES_RANK'] == '3': time.sleep(120)\n"  # still starting
            "with hpcfutures.Executor() as ex:\n"
            "    print('SUM', sum(ex.map(abs, range(-10, 0))))\n")
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "4", "--grace", "1",
                   sys.executable, "-c", code], timeout=60)
    assert "SUM 55" in job.stdout, job
    assert "[3] still running" in job.stderr and "still starting" in job.stderr, job
    assert job.returncode == 0, job


def test_run_returns_the_client_status():
    code = "import os, sys; sys.exit(5 if os.environ['HPCFUTURES_RANK'] == '1' else 0)"
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "3",
                   sys.executable, "-c", code], timeout=30)
    assert job.returncode == 5


def test_run_without_a_command_is_a_usage_error():
    job = run_job([sys.executable, "-m", "hpcfutures", "run", "-n", "2"], timeout=30)
    assert job.returncode == 2 and "no command" in job.stderr


def test_info_explains_the_detected_role():
    env = {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "4", "HPCFUTURES_LAUNCH_ID": "xyz"}
    job = run_job([sys.executable, "-m", "hpcfutures", "info", "--json"], env=env, timeout=30)
    report = json.loads(job.stdout)
    assert report["launcher"] == "run" and report["role"] == "client"
    assert report["rank"] == 1 and report["size"] == 4
    assert "scheduler file" in report["address_exchange"]
    assert any("HPCFUTURES_RANK" in line for line in report["why"])
    assert report["settings"]["timeout"]["source"] == "default"


def test_info_reports_a_bad_environment_instead_of_crashing():
    env = {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "4", "HPCFUTURES_LAUNCH_ID": "xyz",
           "HPCFUTURES_TIMEOUT": "never"}
    job = run_job([sys.executable, "-m", "hpcfutures", "info"], env=env, timeout=30)
    assert job.returncode != 0 and "HPCFUTURES_TIMEOUT" in (job.stdout + job.stderr)


@pytest.mark.timeout(120)
def test_a_successful_launch_prints_nothing_but_the_results():
    job = hpcfutures_run(4, ROOT / "examples" / "monte_carlo.py", timeout=90)
    assert job.returncode == 0, job
    assert own_lines(job.stderr).strip() == "", f"noise on stderr:\n{job.stderr}"
    assert job.stdout.count("\n") == 1


@pytest.mark.timeout(120)
def test_log_dir_gets_one_tagged_file_per_rank(tmp_path):
    job = hpcfutures_run(4, JOBS / "fail_job.py", timeout=90,
                         env={"HPCFUTURES_LOG_DIR": str(tmp_path)})
    assert job.returncode != 0
    (launch_dir,) = tmp_path.iterdir()
    names = sorted(p.name for p in launch_dir.iterdir())
    assert names == ["rank-0-scheduler.log", "rank-1-client.log",
                     "rank-2-worker.log", "rank-3-worker.log"], names
    scheduler_log = (launch_dir / "rank-0-scheduler.log").read_text()
    assert "[rank 0 scheduler]" in scheduler_log
    assert "the client left its executor with status 1" in scheduler_log
    # Everything the rank logs at INFO is in its file, not on the console.
    assert "the client left its executor" not in job.stderr, job.stderr


@pytest.mark.timeout(120)
def test_log_dir_option_in_the_script_works_like_the_variable(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import hpcfutures\n"
                      f"with hpcfutures.Executor(log_dir={str(tmp_path / 'logs')!r}) as ex:\n"
                      "    print(ex.submit(abs, -3).result())\n")
    job = hpcfutures_run(3, script, timeout=90)
    assert job.returncode == 0, job
    (launch_dir,) = (tmp_path / "logs").iterdir()
    names = sorted(p.name for p in launch_dir.iterdir())
    assert names == ["rank-0-scheduler.log", "rank-1-client.log", "rank-2-worker.log"], names
    assert "[rank 2 worker]" in (launch_dir / "rank-2-worker.log").read_text()


@pytest.mark.timeout(120)
def test_exit_when_done_false_returns_on_every_rank_with_none():
    job = hpcfutures_run(4, JOBS / "return_job.py", timeout=90)
    assert job.returncode == 0, job
    assert "RESULT 15" in job.stdout
    # each line tagged by hpcfutures run with the rank and role that printed it
    after = sorted(line for line in job.stdout.splitlines() if "] AFTER" in line)
    assert after == ["[rank 0 scheduler] AFTER rank=0 role=scheduler client=False",
                     "[rank 1 client] AFTER rank=1 role=client client=True",
                     "[rank 2 worker] AFTER rank=2 role=worker client=False",
                     "[rank 3 worker] AFTER rank=3 role=worker client=False"], job


@pytest.mark.timeout(60)
def test_run_ends_copies_that_ignore_a_forwarded_signal():
    code = ("import os, signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "os.write(1, b'READY\\n')\n"  # one write: the two copies share the pipe
            "time.sleep(300)\n")  # the copy never ends by itself: run must end it
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "run", "-n", "2", "--grace", "1",
         sys.executable, "-c", code],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), MARKER_VAR: marker})
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        out.wait_for("READY", timeout=40, count=2)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        out.rest(30)  # every copy has closed the pipes: all have ended
        err.rest(30)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert elapsed < scaled(10), f"stopping took {elapsed:.1f} s"
    assert "after the signal" in err.text()
    assert_no_leftovers(marker)
