"""Faults and exposure under every launcher: laptop, ``hpcfutures run``, ``srun``, ``mpiexec``.

Each test starts a real launch of a job in tests/jobs, in its own process
group and with a unique marker in its environment (so its processes can be
found, and none may be left behind), and times the outcome for the failure
matrix (docs/failures.rst).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import (
    JOBS,
    LAPTOP_WORKERS,
    LAUNCHERS,
    Launch,
    have_mpi,
    http_answers,
    listening,
    own_lines,
    record_failure_time,
    require,
    untagged,
    wait_until,
)
from pace import scaled

from hpcfutures.launchers.mpi import FAILURE_GRACE


# ------------------------------------------------------------- 1. nothing over HTTP
@pytest.mark.timeout(150)
def test_no_rank_serves_anything_over_http(launcher, launches, tmp_path):
    """The scheduler (without the dashboard) and every worker listen only on their
    TLS port: nothing else, and no HTTP answer from another process on any of them."""
    go = tmp_path / "go"
    n = 4
    launch = launches(launcher, n, "quiet_job.py", env={"HPCFUTURES_TEST_GO": str(go)})
    launch.out.wait_for("READY", 90)
    listeners = 1 + (LAPTOP_WORKERS if launcher == "laptop" else n - 2)  # scheduler, workers
    # MPI listens too: one port per rank (UCX), plus mpiexec's own, which every
    # rank inherits; neither is hpcfutures'.
    mpi = 1 if launcher == "mpiexec" else 0

    def ours() -> dict[int, list[tuple[str, int]]]:
        inherited = {address for addresses in listening(launch.launchers()).values()
                     for address in addresses}
        return {pid: [a for a in addresses if a not in inherited]
                for pid, addresses in listening(launch.ranks()).items()}

    found = wait_until(ours, 30, f"{listeners} processes of the launch listening",
                       done=lambda f: sum(len(a) > mpi for a in f.values()) >= listeners)
    assert sorted(len(addresses) - mpi for addresses in found.values()).count(1) == listeners
    assert all(len(addresses) <= 1 + mpi for addresses in found.values()), found
    ports = [address for addresses in found.values() for address in addresses]
    assert all(ip == "127.0.0.1" for ip, _ in ports), found
    assert http_answers([f"{ip}:{port}" for ip, port in ports]) == [], found
    go.touch()
    assert launch.finish(60) == 0


# --------------------------------------------------- 3. multiprocessing in a task
@pytest.mark.timeout(120)
def test_a_task_may_use_a_multiprocessing_pool(launcher, launches):
    """The pool's cleanup (SIGTERM to its processes) must not reach the worker rank:
    every worker stays, and a clean run ends 0."""
    launch = launches(launcher, 4, "pool_job.py")
    code = launch.finish(90)
    record_failure_time("task uses multiprocessing.Pool: run ends 0", launcher,
                        time.monotonic() - launch.started)
    assert code == 0, launch
    assert "POOL RESULTS OK" in launch.out.rest(), launch
    assert "left the launch before the end" not in launch.err.rest(), launch



@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["run", "srun", "mpiexec"], indirect=True)
def test_a_process_a_call_left_running_ends_with_its_worker(launcher, launches):
    """Under mpiexec a forgotten process holds the job's output pipes and the
    launcher never returned; under hpcfutures run it outlived the launch."""
    launch = launches(launcher, 3, "leftover_job.py")
    pid = int(untagged(launch.out.wait_for("LEFT RUNNING", 90)).split()[2])
    assert launch.finish(30) == 0, launch
    assert not os.path.exists(f"/proc/{pid}"), f"process {pid} outlived the launch\n{launch}"


_SIGNALLED_BEFORE_IT_RUNS = r"""
import asyncio, os, signal, sys
from multiprocessing import get_context

from hpcfutures._support.loop import stop_on_signals

# Registered before hpcfutures' own fork hooks, so it runs first in the child:
# the child is signalled before it could undo the routing it inherited, as when
# the kernel has not run it yet by the time its parent terminates it.
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))


def nap():
    import time
    time.sleep(30)


async def main():
    heard = []
    stop_on_signals(heard.append)
    child = get_context("fork").Process(target=nap)
    child.start()
    await asyncio.get_running_loop().run_in_executor(None, child.join, 20)
    await asyncio.sleep(0.3)  # time for a wake-up byte, had the child written one
    print("CHILD", child.exitcode, "PARENT HEARD", heard, flush=True)


asyncio.run(main())
"""


def test_a_forked_child_signalled_before_it_runs_dies_and_its_parent_hears_nothing():
    """A task's multiprocessing.Pool ended on a busy machine: its children got
    SIGTERM before they ran a line.  Through the signal routing they inherited,
    the parent rank took the signal as its own and stopped mid-map, and the
    child, its handler a no-op, lived on and kept ``mpiexec`` from returning."""
    result = subprocess.run([sys.executable, "-c", _SIGNALLED_BEFORE_IT_RUNS],
                            capture_output=True, text=True, timeout=60)
    assert f"CHILD {-signal.SIGTERM} PARENT HEARD []" in result.stdout, (
        result.stdout, result.stderr)


# ------------------------------------------------------ 4. a prompt end under MPI
@pytest.mark.timeout(150)
@pytest.mark.parametrize("late", [0, 2, 5])  # every worker in time; joining as it ends; after
def test_under_mpiexec_a_finished_launch_ends_promptly_after_the_client(late):
    """Two runs each.  ``late``: rank 3 is held back that long before it registers
    (a Dask preload), so it is still joining, or not even trying yet, when the
    client is done: it must notice at once that the scheduler has gone."""
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    env = {} if not late else {
        "DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{JOBS / "slow_join.py"}"]',
        "HPCFUTURES_TEST_SLOW_RANK": "3", "HPCFUTURES_TEST_SLOW_JOIN": str(late)}
    took, launches = [], []
    for _ in range(2):
        launch = Launch("mpiexec", 4, "short_job.py", env=env)
        try:
            client_done = float(untagged(launch.out.wait_for("CLIENT DONE", 90)).split()[2])
            assert launch.finish(30) == 0, launch
            took.append(time.time() - client_done)
            launches.append(launch)
        finally:
            launch.close()
        record_failure_time(f"client done: mpiexec returns (rank 3 {late} s late)", "mpiexec",
                            took[-1])
    # 0.4-1.5 s on an idle machine; 3 s leaves room for a loaded one (a load average
    # of 12 on the 2 cores of the CI machine gave up to 2.3 s).  Before the fix every
    # run took 4 s with a rank joining and 19 s with a rank still looking the
    # scheduler up (probes of a closed port retried for 1 or 5 s each), so the best
    # of two runs shows the fix; one slow run in a full suite (5.6 s once, in a floor
    # run; 5 runs of this test alone took under 1 s) is only bounded, short of those.
    shown = ", ".join(f"{t:.1f} s" for t in took)
    said = f"mpiexec returned {shown} after the client was done\n{launches}"
    assert min(took) < scaled(3.0), said
    assert max(took) < scaled(10.0), said


# ------------------------------------------------------- 5. an executor in a task
@pytest.mark.timeout(150)
def test_an_executor_inside_a_task_is_refused_at_once(launcher, launches):
    launch = launches(launcher, 4, "nested_job.py")
    line = launch.out.wait_for("NESTED REFUSED", 120)
    seconds = float(untagged(line).split()[3])
    record_failure_time("Executor() inside a task: NestedExecutorError", launcher, seconds)
    assert seconds < scaled(5), line
    where = "local worker" if launcher == "laptop" else "rank "
    assert f"runs on {where}" in line and "submit it from the client" in line, line
    assert launch.finish(60) == 0, launch
    assert "STILL USABLE" in launch.out.rest(), launch


# ---------------------------------------------------------- 6. stopped mid-map
# How the user stops a launch, per launcher: (what, signal, to the group).  One signal
# each where the signal-while-reading test below sends both to the same launcher; the
# srun ways (scancel, the time limit) are tested only here.
STOPS = {
    "laptop": [("Ctrl-C", signal.SIGINT, True)],
    "run": [("SIGTERM", signal.SIGTERM, False)],
    "srun": [("scancel", None, False), ("the time limit", None, False)],
    "mpiexec": [("Ctrl-C", signal.SIGINT, True)],
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("launcher", "stop"), [
    pytest.param(launcher, stop, id=f"{launcher}-{way[0].replace(' ', '-')}")
    for launcher, ways in STOPS.items() for stop, way in enumerate(ways)],
    indirect=["launcher"])
def test_stopping_a_launch_mid_map_leaves_no_dask_cancellation_noise(launcher, stop, launches):
    what, signum, group = STOPS[launcher][stop]
    limit = what == "the time limit"
    # The time limit: a minute (Slurm's smallest), and a drain that starts 45 s before
    # its end rather than the default 30 s, so the test does not wait half a minute.
    launch = launches(launcher, 4, "long_map_job.py",
                      env={"HPCFUTURES_SRUN_TIME": "1", "HPCFUTURES_DRAIN_MARGIN": "45"}
                      if limit else None)
    launch.out.wait_for("READY", 90)
    if limit:
        pass  # the drain ends the map some 15 s after the job started
    elif signum is None:
        subprocess.run(["scancel", "--name", launch.name], capture_output=True, timeout=30)
    elif group:
        os.killpg(launch.process.pid, signum)  # as a terminal's Ctrl-C does
    else:
        launch.process.send_signal(signum)
    stopped = time.monotonic()
    code = launch.finish(150 if limit else 30)
    took = time.monotonic() - stopped
    if not limit:
        record_failure_time(f"{what} mid-map: launch ends, no Dask noise", launcher, took)
        assert took < scaled(10), f"{took:.1f} s\n{launch}"
    # What hpcfutures and the job said: no cancellation leaks out of ours (Dask's own
    # records while a process is being stopped are not the test's to judge).
    output = own_lines(launch.out.rest() + launch.err.rest())
    assert "CancelledError" not in output and "Async instruction" not in output, launch
    assert code != 0, launch


# ------------------------------------------- 7. a signal while map reads its items
def stop(launch: Launch, signum: int) -> None:
    """Send ``signum`` the way a user would: Ctrl-C to the terminal's process group,
    SIGTERM to the launcher (srun: ``scancel --signal``, to every task)."""
    if launch.launcher == "srun":
        subprocess.run(["scancel", "--signal", signal.Signals(signum).name.removeprefix("SIG"),
                        "--name", launch.name], capture_output=True, timeout=30)
    elif signum == signal.SIGINT:
        os.killpg(launch.process.pid, signum)
    else:
        launch.process.send_signal(signum)


@pytest.mark.timeout(150)
# Each launcher gets both sources and both signals, in two launches rather than four:
# what differs between launchers is how the signal reaches the client, and each pairing
# of source and signal still meets two launchers (the suite's time budget).
@pytest.mark.parametrize(("launcher", "source", "signum"), [
    (launcher, source, signum)
    for launcher, pairs in {
        "laptop": [("endless", signal.SIGINT), ("slow", signal.SIGTERM)],
        "run": [("endless", signal.SIGTERM), ("slow", signal.SIGINT)],
        "srun": [("endless", signal.SIGINT), ("slow", signal.SIGTERM)],
        "mpiexec": [("endless", signal.SIGTERM), ("slow", signal.SIGINT)],
    }.items() for source, signum in pairs],
    ids=lambda value: value.name if isinstance(value, signal.Signals) else str(value),
    indirect=["launcher"])
def test_a_signal_ends_a_map_while_it_reads_its_items(launcher, source, signum, launches):
    """``map(f, itertools.count())`` reads its items in C: the signal could land only
    in a garbage-collector callback, which dropped it (and the next SIGTERM was
    ignored); ``slow``: a Python generator."""
    launch = launches(launcher, 4, "endless_map_job.py", source)
    launch.out.wait_for("STARTED", 90)
    stop(launch, signum)
    stopped = time.monotonic()
    code = launch.finish(30)
    took = time.monotonic() - stopped
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    record_failure_time(f"{name} while map reads an endless iterable: launch ends", launcher,
                        took)
    output = launch.out.rest() + launch.err.rest()
    assert took < scaled(10), f"{took:.1f} s\n{launch}"
    stopped_statuses = {128 + signum, -signum}
    if launcher == "mpiexec":
        # Hydra forwards the signal to every rank; when the client's MPI_Abort
        # (status 128+N) wins the race with the other ranks' own exits, Hydra
        # reports the signal it forwarded (N) rather than the client's status.
        stopped_statuses.add(signum)
    assert code in stopped_statuses, launch
    assert "Exception ignored" not in output and "MemoryError" not in output, launch
    assert "distributed." not in output and "CancelledError" not in output, launch


# ------------------------------------------------- 8. a worker that cannot start
@pytest.mark.timeout(150)
# ``interface`` has no laptop case: one process decides every local worker's settings,
# so there is nothing for the workers to differ in.
@pytest.mark.parametrize(("launcher", "setting"), [
    (launcher, setting) for launcher in LAUNCHERS for setting in ("interface", "preload")
    if (launcher, setting) != ("laptop", "interface")], indirect=["launcher"])
def test_when_no_worker_can_start_everyone_learns_why_within_seconds(launcher, setting,
                                                                    launches):
    """``interface``: the worker ranks alone are given an interface their host lacks
    (nodes differ); ``preload``: a Dask setting only workers read names a missing file."""
    job, env = (("bad_worker_job.py", {}) if setting == "interface" else
                ("short_job.py", {"DASK_DISTRIBUTED__WORKER__PRELOAD": '["/nonexistent.py"]'}))
    launch = launches(launcher, 4, job, env={"HPCFUTURES_TIMEOUT": "60", **env})
    code = launch.finish(60)
    took = time.monotonic() - launch.started
    record_failure_time(f"no worker can start ({setting}): all end, saying why", launcher,
                        took)
    errors = launch.err.rest()
    cause = ("ValueError: 'nope0' is not a valid network interface" if setting == "interface" else
             "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent.py'")
    assert code != 0 and "CLIENT DONE" not in launch.out.rest(), launch
    assert f"failed to start: {cause}" in errors, launch
    if launcher != "mpiexec":  # there the failing rank's MPI_Abort may end the client first
        assert "LauncherError: no worker could start, so the launch ends:" in errors, launch
    assert took < scaled(20), f"{took:.1f} s (the start-up timeout is 60 s)\n{launch}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("launcher", ["run", "srun", "mpiexec"], indirect=True)
def test_a_rank_that_cannot_start_leaves_even_when_the_script_catches_errors(launcher,
                                                                            launches):
    """The script catches every error around its ``with`` block and goes on: only the
    client runs the code after it; the worker ranks that failed to start leave (they
    raised into the script, and ran that code too)."""
    launch = launches(launcher, 4, "caught_start_job.py", env={"HPCFUTURES_TIMEOUT": "60"})
    launch.finish(60)
    took = time.monotonic() - launch.started
    after = [line for line in launch.out.rest().splitlines() if "AFTER THE BLOCK" in line]
    assert len(after) == 1 and "LauncherError" in after[0], launch
    assert "rank 2" not in after[0] and "rank 3" not in after[0], launch
    assert "(worker) failed" in launch.err.rest(), launch
    # Under MPI the client that caught its error finalizes at exit, outside the barrier
    # where the other ranks wait for it: they abort the job after FAILURE_GRACE (30 s).
    limit = scaled(20) + (FAILURE_GRACE if launcher == "mpiexec" else 0)
    assert took < limit, f"{took:.1f} s (the start-up timeout is 60 s)\n{launch}"
