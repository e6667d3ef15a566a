"""Releasing idle workers: a narrowing computation hands back what it no longer uses.

With ``release_idle_after`` set, a worker idle that long retires (its results
moved to the others first) and its rank exits 0, while the client goes on;
``min_workers`` are kept.  Checked on the laptop default, under ``hpcfutures
run``, and for real with ``sbatch --array`` on the local Slurm, where the
released elements must reach COMPLETED while the client still runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import types
import uuid

import pytest
from helpers import (
    JOBS,
    MARKER_VAR,
    ROOT,
    Batch,
    Lines,
    assert_no_leftovers,
    job_facts,
    processes_with_marker,
    require,
    slurm_is_up,
    wait_until,
)

import hpcfutures
from hpcfutures._dask.release import IdleRelease

RELEASE_ENV = {"HPCFUTURES_RELEASE_IDLE_AFTER": "1", "HPCFUTURES_MIN_WORKERS": "1",
               "HPCFUTURES_HOST": "127.0.0.1"}


# ----------------------------------------------------------- the rule itself
class FakeScheduler:
    """The few scheduler attributes IdleRelease reads, for the rule's unit tests."""

    def __init__(self, busy: dict[str, bool]):
        running = types.SimpleNamespace(name="running")
        self.workers = {a: types.SimpleNamespace(processing={"t"} if b else set(),
                                                 status=running, name=a)
                        for a, b in busy.items()}
        self.unrunnable, self.closed, self.said = {}, [], []

    async def retire_workers(self, workers, **_):
        return {a: {"name": a} for a in workers}

    def close_worker(self, address):
        self.closed.append(address)


def test_only_workers_idle_long_enough_retire_and_the_minimum_stays():
    scheduler = FakeScheduler({"a": False, "b": False, "c": True})
    release = IdleRelease(scheduler, idle_after=10, keep=1, say_goodbye=scheduler.said.append)
    assert asyncio.run(release.release_once(now=0)) == []  # idle clocks start
    assert asyncio.run(release.release_once(now=9)) == []
    assert asyncio.run(release.release_once(now=10)) == ["a", "b"]
    assert scheduler.said == scheduler.closed == ["a", "b"]


def test_the_minimum_is_kept_even_when_everyone_is_idle():
    scheduler = FakeScheduler({"a": False, "b": False, "c": False})
    release = IdleRelease(scheduler, idle_after=1, keep=2, say_goodbye=scheduler.said.append)
    asyncio.run(release.release_once(now=0))
    assert len(asyncio.run(release.release_once(now=5))) == 1


def test_nobody_is_idle_while_work_waits_or_before_a_client_came():
    scheduler = FakeScheduler({"a": False, "b": False})
    scheduler.unrunnable = {"waiting-task": None}  # needs what no worker has yet
    release = IdleRelease(scheduler, idle_after=1, keep=1, say_goodbye=scheduler.said.append)
    asyncio.run(release.release_once(now=0))
    assert asyncio.run(release.release_once(now=5)) == []
    early = IdleRelease(FakeScheduler({"a": False, "b": False}), 1, 1, print,
                        started=lambda: False)
    asyncio.run(early.release_once(now=0))
    assert asyncio.run(early.release_once(now=5)) == []


# ------------------------------------------------------------- real launches
def nap(seconds):
    time.sleep(seconds)  # a task that takes time: the behaviour these tests need
    return seconds


def worker_count(ex) -> int:
    """Asked of the scheduler now, through the public API (Dask's
    client.scheduler_info() is a copy that its periodic refresh may bring back a
    moment stale: 1 worker, then 2, in CI)."""
    return len(ex.worker_memory_limits())


@pytest.mark.timeout(60)
def test_laptop_idle_workers_retire_while_the_client_goes_on(caplog):
    with hpcfutures.Executor(max_workers=3, release_idle_after=0.5, min_workers=1) as ex:
        assert list(ex.map(nap, [0.2] * 6)) == [0.2] * 6
        narrow = ex.submit(nap, 4)  # holds one worker while the others go idle
        wait_until(lambda: worker_count(ex), 20, "the idle workers retiring",
                   done=lambda count: count <= 1)
        assert worker_count(ex) == 1
        assert narrow.result(timeout=30) == 4  # the busy worker was kept
        assert list(ex.map(abs, [-1, -2])) == [1, 2]
    assert "left the launch" not in caplog.text  # retired on purpose, not lost


def rank_alive(marker: str, rank: int) -> bool:
    return bool(processes_with_marker(marker, HPCFUTURES_RANK=str(rank)))


@pytest.mark.timeout(120)
def test_under_hpcfutures_run_released_ranks_exit_0_and_the_launch_succeeds(tmp_path):
    marker, go = uuid.uuid4().hex, tmp_path / "go"
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "run", "-n", "6", sys.executable,
         str(JOBS / "release_job.py"), "4", str(go)],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, **RELEASE_ENV, "PYTHONPATH": str(ROOT), MARKER_VAR: marker})
    stdout, stderr = Lines(process.stdout), Lines(process.stderr)
    try:
        stdout.wait_for("NARROW STAGE STARTED", timeout=90)
        workers = [2, 3, 4, 5]
        # All but one worker rank leave (one runs the narrow stage), the client stays.
        wait_until(lambda: sum(rank_alive(marker, r) for r in workers), 30,
                   "three idle worker ranks exiting", done=lambda alive: alive == 1)
        assert rank_alive(marker, 1), "the client rank ended early"
        go.touch()
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out, err = stdout.rest(), stderr.rest()
    assert "NARROW STAGE OK" in out and "AFTER RELEASE OK" in out, (out, err)
    assert process.returncode == 0, (out, err)  # released ranks exited 0
    assert_no_leftovers(marker)


ARRAY_SCRIPT = "exec python3 {job} 4 {go}\n"


@pytest.mark.slurm
@pytest.mark.timeout(150)
def test_sbatch_array_idle_elements_complete_while_the_client_runs(tmp_path):
    """sbatch --array=0-5: 0 scheduler, 1 client, 2-5 workers; 3 of them are released."""
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    env = {**RELEASE_ENV, "HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
           "HPCFUTURES_TIMEOUT": "60", "HPCFUTURES_ARRAY_TIMEOUT": "60"}
    batch, go = Batch(tmp_path, env), tmp_path / "go"
    try:
        job = batch.submit(ARRAY_SCRIPT.format(job=JOBS / "release_job.py", go=go),
                           "--array=0-5", "-o", str(tmp_path / "out_%a.out"))
        client_out = tmp_path / "out_1.out"
        wait_until(lambda: client_out.exists() and "NARROW STAGE STARTED" in
                   client_out.read_text(), 90, "the narrow stage starting",
                   details=batch.outputs)

        def completed() -> list[int]:
            return [e for e in range(2, 6)
                    if job_facts(f"{job}_{e}").get("JobState") == "COMPLETED"]

        wait_until(completed, 30, "three idle elements completing",
                   done=lambda elements: len(elements) == 3, details=batch.outputs)
        assert job_facts(f"{job}_1")["JobState"] == "RUNNING", batch.outputs()
        released = completed()
        go.touch()
        for element in range(6):
            facts = batch.wait(f"{job}_{element}")
            assert (facts["JobState"], facts["ExitCode"]) == ("COMPLETED", "0:0"), batch.outputs()
        text = client_out.read_text()
        assert "NARROW STAGE OK" in text and "AFTER RELEASE OK" in text, batch.outputs()
        assert "WIDE STAGE OK on 4 workers" in text, batch.outputs()
        print(f"released elements {released} while the client ran")
    finally:
        batch.cancel_all()
        print(batch.outputs())
        assert_no_leftovers(batch.marker, grace=15)


@pytest.mark.slurm
@pytest.mark.timeout(150)
def test_example_array_script_releases_workers_before_the_client_ends(tmp_path):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    env = {"HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
           "HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_RELEASE_IDLE_AFTER": "1"}
    batch = Batch(tmp_path, env)
    try:
        job = batch.submit((ROOT / "examples" / "slurm_array_release.sh").read_text(),
                           "-o", str(tmp_path / "out_%a.out"))
        ends = {}
        for element in range(6):
            facts = batch.wait(f"{job}_{element}", timeout=120)
            assert (facts["JobState"], facts["ExitCode"]) == ("COMPLETED", "0:0"), batch.outputs()
            ends[element] = end_time(f"{job}_{element}")
        assert "(correct)" in (tmp_path / "out_1.out").read_text(), batch.outputs()
        released = [e for e in range(2, 6) if ends[e] < ends[1]]
        assert len(released) >= 2, (ends, batch.outputs())
    finally:
        batch.cancel_all()
        print(batch.outputs())
        assert_no_leftovers(batch.marker, grace=15)


def end_time(job_id: str) -> str:
    """A finished job's EndTime (ISO, to the second) from ``scontrol show job``."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                         text=True, timeout=30).stdout
    return out.split("EndTime=", 1)[1].split()[0]
