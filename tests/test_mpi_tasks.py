"""MPI tasks (issue 20): ``hpcfutures.mpi_task(fn, ranks=N)``.

Unit tests first (the wrapper, the checks at ``submit``, how a failing member
is named), then one job script that checks every case of the issue, launched
for real under ``mpiexec -n 8`` and ``srun --mpi=pmi2 -n 8`` (6 workers each).
The reservation itself is tested on a real scheduler in test_dask_seams.py,
and the laptop's "no MPI world" error in test_contract_local.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import pickle
import sys
import time
import types

import cloudpickle
import pytest
from helpers import JOBS, MPI_LOOPBACK, ROOT, have_mpi, require, run_job, slurm_is_up
from pace import scaled

import hpcfutures
from hpcfutures import LauncherError, MPITask, mpi_task
from hpcfutures._facade.mpi.mpicalls import _call_outcomes, member_failure
from hpcfutures._facade.mpi.mpilanes import GROUP_SECONDS, CallQueue, lanes
from hpcfutures._facade.mpi.mpitask import check_launch, results_in_order
from hpcfutures._launch.plan import negotiate
from hpcfutures._remote.calls import BundleOutcome, run_task
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers.mpi import MPILauncher

JOB = JOBS / "mpi_task_job.py"
MPI_ENV = {**MPI_LOOPBACK, "HPCFUTURES_TIMEOUT": "60"}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "8", "PMI_FD": "9", "MPI_LOCALRANKID": "1",
         "MPI_LOCALNRANKS": "8"}
SRUN = {"SLURM_JOB_ID": "29", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "8",
        "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NUM_NODES": "1", "SLURM_LOCALID": "1"}
RUN = {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "8", "HPCFUTURES_LAUNCH_ID": "x"}


def solve(comm, x):
    return comm.allreduce(x)


# ---------------------------------------------------------------- the wrapper
def test_the_wrapper_is_picklable_and_refuses_bad_arguments():
    task = mpi_task(solve, ranks=4)
    assert isinstance(task, MPITask) and (task.fn, task.ranks) == (solve, 4)
    assert task.__name__ == "solve" and repr(task) == "mpi_task('solve', ranks=4)"
    assert pickle.loads(pickle.dumps(task)) == task
    assert cloudpickle.loads(cloudpickle.dumps(mpi_task(lambda comm: 1, 2))).ranks == 2
    with pytest.raises(ValueError, match="ranks must be at least 1, got 0"):
        mpi_task(solve, ranks=0)
    with pytest.raises(TypeError, match="ranks must be an int"):
        mpi_task(solve, ranks=True)
    with pytest.raises(TypeError, match="needs a callable"):
        mpi_task("solve", ranks=2)
    with pytest.raises(TypeError, match="already an mpi_task"):
        mpi_task(task, ranks=2)
    with pytest.raises(TypeError, match="runs only when submitted to an hpcfutures executor"):
        task(1)


# ------------------------------------------------------------ checks at submit
def session_for(monkeypatch, environ, rank=1, **options):
    """What check_launch reads of a session: its plan (negotiated on a fake world of
    8 ranks) and its settings."""
    monkeypatch.setattr(MPILauncher, "_world", lambda self: (rank, 8, "FakeMPI 1.0"))
    settings = resolve_settings(options, environ={}, dask_config={})
    return types.SimpleNamespace(plan=negotiate(settings, environ), settings=settings)


def test_too_many_ranks_is_a_value_error_with_both_numbers(monkeypatch):
    session = session_for(monkeypatch, HYDRA)
    check_launch(session, 6)
    with pytest.raises(ValueError, match=r"asks for 7 ranks, but this launch has only 6 worker"):
        check_launch(session, 7)
    # with the scheduler in the client, one more rank works
    check_launch(session_for(monkeypatch, {**HYDRA, "PMI_RANK": "0"}, rank=0,
                             scheduler_in_client=True), 7)


@pytest.mark.parametrize("environ, launch", [
    pytest.param(SRUN, "'slurm' launcher", id="plain-srun"),
    pytest.param(RUN, "'run' launcher", id="hpcfutures-run"),
    pytest.param({}, "single process", id="laptop"),
])
def test_a_launch_without_an_mpi_world_names_the_launches_that_give_one(monkeypatch, environ,
                                                                         launch):
    session = session_for(monkeypatch, environ)
    with pytest.raises(LauncherError, match=launch) as raised:
        check_launch(session, 1)
    assert "mpiexec -n <N>" in str(raised.value)
    assert "srun --mpi=pmi2 -n <N>" in str(raised.value)


def test_a_failing_member_keeps_its_type_and_is_named():
    def fails(comm):
        raise KeyError("member one fails")

    try:
        run_task(fails, (None,), {})
    except KeyError as err:
        annotated = err
    outcomes = [None, None, annotated, RuntimeError("later")]  # member 0's value, errors
    error = member_failure(mpi_task(fails, 3), [4, 6, 7], outcomes)
    assert isinstance(error, KeyError)
    cause = str(error.__cause__)
    assert "member rank 1 of 3 of MPI task" in cause and "(MPI world rank 6)" in cause
    assert "member one fails" in cause and "Traceback from" in cause
    assert member_failure(mpi_task(fails, 1), [2], [1, None]) is None


def test_a_map_shares_reservations_among_consecutive_calls_and_yields_in_order():
    # as many lanes (groups at once) as the workers hold, no more than the items
    assert (lanes(200, ranks=2, workers=6), lanes(2, 2, 6), lanes(9, 4, 3)) == (3, 2, 1)
    # the first group: chunksize calls; then as many as fill GROUP_SECONDS at the
    # last group's pace, at most an even share per lane of what is left
    pending = [(cf.Future(), ((item,), {})) for item in range(1000)]
    queue = CallQueue(mpi_task(solve, 2), pending, least=3, lanes=2)
    first = queue.take()
    assert [call[0] for _, call in first] == [(0,), (1,), (2,)]
    assert all(future.running() for future, _ in first)
    queue.measured(BundleOutcome([(True, 1)] * 3, [0.001, 0.02, 0.03]))
    assert queue.size() == int(GROUP_SECONDS / 0.02)  # at the median's pace
    queue.measured(BundleOutcome([(True, 1)], [1e-9]))
    assert queue.size() == 16 * 3  # at most 16 times the largest group so far
    queue.last = 100
    assert queue.size() == 997 // 2 + 1  # the even share
    queue.measured(BundleOutcome([(True, 1)], [60.0]))
    assert queue.size() == 3  # slow calls: chunksize
    for future, _ in pending[3:10]:
        future.cancel()
    assert [call[0] for _, call in queue.take()] == [(10,), (11,), (12,)]
    assert queue.left() and len(queue.pending) == 987
    # each call's outcome: member 0's value, then each member's error (None: fine)
    boom = KeyError("boom")
    outcomes = [BundleOutcome([(True, "a"), (True, "b")], [0, 0]),
                BundleOutcome([(True, None), (False, boom)], [0, 0])]
    assert _call_outcomes(outcomes, 0) == ["a", None, None]
    assert _call_outcomes(outcomes, 1) == ["b", None, boom]
    lost = RuntimeError("worker lost")
    assert _call_outcomes([None, lost], 1) == [None, None, lost]
    # results in order; those not yet yielded are cancelled when the iterator closes
    futures = [cf.Future() for _ in range(3)]
    futures[0].set_result(1)
    results = results_in_order(futures, time.monotonic() + 0.05)
    assert next(results) == 1
    with pytest.raises(cf.TimeoutError):
        next(results)
    assert futures[1].cancelled() and futures[2].cancelled()


# ======================================================= real MPI, real Slurm
def mpi_tasks_passed(job) -> bool:
    return job.returncode == 0 and "MPI TASKS OK" in job.stdout and (
        "FAILED" not in job.stdout)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_mpi_tasks_under_mpiexec():
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    job = run_job(["mpiexec", "-n", "8", sys.executable, JOB], env=MPI_ENV, timeout=100)
    assert mpi_tasks_passed(job), job


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_member_that_dies_ends_the_mpi_job_at_once():
    """Its partner waits for it inside MPI, where nothing interrupts it: MPI's rule.
    First, a member that raises while its partner waits for it forever: its error
    comes at once all the same (told by an event, not by the end of the members)."""
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    job = run_job(["mpiexec", "-n", "6", sys.executable, JOB, "dies"], env=MPI_ENV, timeout=45)
    assert "CHECK told at once: ok" in job.stdout, job  # before: an error, its partner stuck
    assert job.returncode != 0 and "the call whose member died returned" not in job.stderr, job
    assert "died (or lost its connection) while it ran member rank 1 of 2" in job.stderr, job
    assert "MPI_Abort" in job.stderr and job.seconds < scaled(30), job


@pytest.mark.mpi
@pytest.mark.timeout(90)
def test_the_example_runs():
    """examples/mpi_tasks.py, on 6 ranks (4 workers: the 2-rank calls follow the 4-rank one)."""
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    job = run_job(["mpiexec", "-n", "6", sys.executable, ROOT / "examples" / "mpi_tasks.py"],
                  env=MPI_ENV, timeout=75)
    assert job.returncode == 0, job
    assert ("integral of sin over [0, pi] ~= 2.000000 on 4 ranks; halves 1.000000 + 1.000000"
            in job.stdout and "cos(pi) = -1.0" in job.stdout), job


@pytest.mark.mpi
@pytest.mark.slurm
@pytest.mark.timeout(150)
def test_mpi_tasks_under_srun_mpi_pmi2():
    require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    job = run_job(["srun", "--mpi=pmi2", "-n8", "-t", "3", sys.executable, JOB], env=MPI_ENV,
                  timeout=130)
    assert mpi_tasks_passed(job), job


def test_the_public_name_is_exported():
    assert hpcfutures.mpi_task is mpi_task
