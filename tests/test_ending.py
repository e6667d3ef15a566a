"""How an executor ends, as with ProcessPoolExecutor (laptop default; issue 15).

The launchers run the same endings through ``jobs/contract_job.py`` (its last
part) and ``jobs/ending_job.py``; the interpreter-exit cases run a child
interpreter here.
"""

import concurrent.futures as cf
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from contract import sleep_then, square
from helpers import ROOT, child_pids
from pace import scaled
from waiting import wait_until

import hpcfutures

ENDING_JOB = Path(__file__).parent / "jobs" / "ending_job.py"


def no_children_left(before, what):
    wait_until(lambda: not (child_pids() - before), 15, f"local workers to exit after {what}")


def test_shutdown_without_wait_returns_at_once_and_lets_work_finish():
    before = child_pids()
    executor = hpcfutures.LocalExecutor(2)
    futures = [executor.submit(sleep_then, 0.5, i) for i in range(6)]
    mapped = executor.map(sleep_then, [0.2] * 6, range(6))
    started = time.monotonic()
    executor.shutdown(wait=False)
    assert time.monotonic() - started < scaled(0.5), "shutdown(wait=False) waited"
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(square, 2)
    assert [f.result(timeout=30) for f in futures] == list(range(6))
    assert list(mapped) == list(range(6))
    executor.shutdown(wait=True)  # joins the ending started by wait=False
    no_children_left(before, "shutdown(wait=False)")


def test_cancel_futures_cancels_only_calls_not_started():
    executor = hpcfutures.LocalExecutor(1)
    futures = [executor.submit(sleep_then, 0.2, i) for i in range(40)]
    mapped = executor.map(sleep_then, [0.2] * 20, range(20))
    wait_until(lambda: any(f.running() for f in futures), 30, "a call to start")
    running = [f for f in futures if f.running()]
    executor.shutdown(wait=True, cancel_futures=True)
    assert all(f.done() for f in futures)
    assert any(f.cancelled() for f in futures), "nothing was cancelled"
    for future in running:  # sent to a worker before shutdown: finished, not cancelled
        assert future.result(timeout=1) == futures.index(future)
    for i, future in enumerate(futures):
        assert future.cancelled() or future.result(timeout=1) == i
    yielded = []
    with pytest.raises(cf.CancelledError):
        for value in mapped:
            yielded.append(value)
    assert yielded == list(range(len(yielded)))  # the chunks sent finished, in order


def test_losing_the_executor_releases_its_workers_after_its_work():
    before = child_pids()
    executor = hpcfutures.LocalExecutor(2)
    future = executor.submit(sleep_then, 0.5, "kept")
    del executor  # no shutdown(): the finalizer ends it once the call is done
    assert future.result(timeout=30) == "kept"
    no_children_left(before, "the executor was lost")


def run_child(code, timeout=90):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return proc, time.monotonic() - started


def test_program_without_shutdown_runs_its_pending_calls_and_leaves_no_worker(tmp_path):
    marker = tmp_path / "ran"
    proc, _ = run_child(f"""
        import time, hpcfutures
        def write(path):
            time.sleep(1)
            open(path, "w").write("ran")
        executor = hpcfutures.LocalExecutor(2)
        executor.submit(write, {str(marker)!r})
        print("PIDS", executor._session._client_side.local_workers.processes[0].pid)
        """)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ran", "the pending call never ran"
    pid = int(proc.stdout.split("PIDS", 1)[1].split()[0])
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 5,
               "the local worker to be gone once the program exited")


def test_submit_from_an_atexit_handler_raises_runtime_error():
    proc, _ = run_child("""
        import atexit, hpcfutures
        executor = hpcfutures.LocalExecutor(1)
        def late():
            try:
                executor.submit(abs, -1)
            except RuntimeError as err:
                print("REFUSED", err)
        atexit.register(late)
        """)
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED cannot schedule new futures after interpreter shutdown" in proc.stdout, (
        proc.stdout, proc.stderr)


def alive(pid):
    """Whether ``pid`` runs (a zombie waiting for whoever adopted it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(90)
def test_a_program_killed_with_sigkill_leaves_no_local_worker():
    """Nothing of the program runs to end the launch, and calls are running: the
    workers see the scheduler (a thread of the killed program) vanish, and leave."""
    code = textwrap.dedent("""
        import time, hpcfutures
        executor = hpcfutures.LocalExecutor(2)
        assert executor.submit(abs, -1).result(timeout=60) == 1
        running = [executor.submit(time.sleep, 100) for _ in range(2)]
        while not all(f.running() for f in running):
            time.sleep(0.01)
        local = executor._session._client_side.local_workers
        print("PIDS", *[p.pid for p in local.processes], flush=True)
        time.sleep(120)
        """)
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}) as proc:
        try:
            line = proc.stdout.readline()
            assert line.startswith("PIDS"), line
            pids = [int(pid) for pid in line.split()[1:]]
            assert len(pids) == 2 and all(alive(pid) for pid in pids)
            proc.kill()
            proc.wait(10)
            started = time.monotonic()
            wait_until(lambda: not any(alive(pid) for pid in pids), 10,
                       "the local workers of a SIGKILLed program to exit")
            assert time.monotonic() - started < scaled(5)
        finally:
            proc.kill()


@pytest.mark.timeout(90)
def test_a_process_pool_forked_inside_the_block_ends_at_once():
    """A ProcessPoolExecutor's workers are forked from the client: at their exit they
    must not try to close the client's executors (their copies have no loop thread, and
    waited out a 30 s timeout each)."""
    code = ("import concurrent.futures as cf, time, hpcfutures\n"
            "with hpcfutures.LocalExecutor(1) as ex:\n"
            "    with cf.ProcessPoolExecutor(2, mp_context=__import__('multiprocessing')"
            ".get_context('fork')) as pool:\n"
            "        assert pool.submit(abs, -1).result() == 1\n"
            "        started = time.monotonic()\n"
            "    print(f'POOL ENDED {time.monotonic() - started:.2f}')\n"
            "    assert ex.submit(abs, -2).result() == 2\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=80, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    ended = float(done.stdout.split("POOL ENDED ")[1])
    assert ended < scaled(5), done.stdout
