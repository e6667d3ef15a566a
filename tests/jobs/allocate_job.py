"""A notebook's part, from the host: allocate a job, use it, leave; print what happened.

    python tests/jobs/allocate_job.py JOB_DIR MODE

``full`` (Slurm): allocate (1 node, 1 task), map; scale to 3 worker jobs, see
them join; scale back to 0 and see them leave; adapt (up to 1 job) while calls
wait and see it join; then cancel the job behind the
executor's back and see a waiting call fail with AllocationLostError (a NotServingError and a
BrokenHPCExecutor) naming the job;
leave.  ``basic`` (Grid Engine): allocate (2 slots), map, leave.  ``components`` (Grid
Engine, which has no heterogeneous jobs): allocate(workers=[2 slots, 1 slot]) submits the
second component as a job of its own, whose task joins as a worker; map over both.
Prints "PASS <check>" lines, "ALLOCATE JOB <id>" and "ALLOCATE DONE".
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import wait_until

import hpcfutures

START = time.monotonic()


def say(line):
    print(f"{line} (at {time.monotonic() - START:.1f} s)", flush=True)


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def scaling(ex):
    ex.scale(3)
    wait_until(ex.workers, 120, "3 worker jobs joining", done=lambda n: n >= 4)
    say(f"PASS scaled_up workers={ex.workers()} jobs={[j.job for j in ex.worker_jobs]}")
    ex.scale(0)
    assert not ex.worker_jobs, ex.worker_jobs
    wait_until(ex.workers, 60, "the worker jobs leaving", done=lambda n: n == 1)
    say("PASS scaled_down")
    ex.adapt(minimum=0, maximum=1, interval=0.5)
    waiting = [ex.submit(sleep_then, 3, n) for n in range(4)]  # more than the one thread
    wait_until(ex.workers, 90, "adapt adding a worker job", done=lambda n: n == 2)
    assert [f.result(timeout=60) for f in waiting] == list(range(4))
    say(f"PASS adapted jobs={[j.job for j in ex.worker_jobs]}")


def dying(ex):
    future = ex.submit(sleep_then, 120, "never")
    subprocess.run(ex.allocation.system.cancel_command(ex.allocation.job), check=True,
                   timeout=30)
    try:
        future.result(timeout=60)
    except hpcfutures.NotServingError as err:
        assert isinstance(err, hpcfutures.AllocationLostError), repr(err)
        assert isinstance(err, hpcfutures.BrokenHPCExecutor), repr(err)
        cause = err.__cause__
        assert isinstance(cause, hpcfutures.NotServingError), repr(cause)
        assert ex.allocation.job in str(cause) and str(ex.allocation.output) in str(cause)
        say("PASS died_with_not_serving")


def components(job_dir):
    shapes = [{"nodes": 1, "tasks_per_node": 2}, {"nodes": 1, "tasks_per_node": 1}]
    with hpcfutures.allocate(workers=shapes, time="00:10:00", job_dir=job_dir, timeout=60,
                             job_name="hpcf-alloc-parts", batch_system="sge") as ex:
        say(f"ALLOCATE JOB {ex.allocation.job}")
        for job in ex.component_jobs:
            say(f"ALLOCATE JOB {job.job}")
        wait_until(ex.workers, 120, "the second component's worker joining",
                   done=lambda n: n >= 2)
        assert sorted(ex.map(abs, range(-20, 0))) == list(range(1, 21))
        say(f"PASS components workers={ex.workers()} jobs={len(ex.component_jobs) + 1}")
    say("ALLOCATE DONE")


def main(job_dir, mode):
    if mode == "components":
        return components(job_dir)
    # One task on Slurm (it serves alone, with a worker on its one CPU): the test's
    # jobs then fit in the local Slurm's 8 CPUs together. Two slots on Grid Engine.
    shape = {"nodes": 1, "tasks_per_node": 1 if mode == "full" else 2}
    # Named for Grid Engine: found by itself, Slurm's sbatch (on PATH here too) comes first.
    chosen = {"batch_system": "sge"} if mode == "basic" else {}
    with hpcfutures.allocate(**shape, time="00:10:00", job_dir=job_dir, timeout=60,
                             job_name="hpcf-alloc-test", **chosen) as ex:
        say(f"ALLOCATE JOB {ex.allocation.job}")
        assert sorted(ex.map(abs, range(-20, 0))) == list(range(1, 21))
        say("PASS map")
        if mode == "full":
            scaling(ex)
            dying(ex)
    say("ALLOCATE DONE")


if __name__ == "__main__":
    main(*sys.argv[1:3])
