"""The contract suite against the laptop default, in this process."""

import time

import pytest
from contract import CHECKS, EXECUTOR_OPTIONS, square
from helpers import MATRIX_CHECKS, child_pids, record_failure_time

import hpcfutures


@pytest.fixture(scope="module")
def ex():
    before = child_pids()
    executor = hpcfutures.LocalExecutor(2, timeout=60, **EXECUTOR_OPTIONS)
    yield executor
    executor.shutdown()
    assert child_pids() - before == set(), "local workers outlived shutdown"


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_contract(ex, check):
    started = time.monotonic()
    check(ex)
    if check.__name__ in MATRIX_CHECKS:
        record_failure_time(MATRIX_CHECKS[check.__name__], "laptop", time.monotonic() - started)


def test_submit_after_shutdown_raises():
    executor = hpcfutures.LocalExecutor(1)
    assert executor.submit(square, 2).result(timeout=30) == 4
    executor.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(square, 2)
    executor.shutdown()  # twice is harmless


def test_shutdown_cancel_futures_cancels_queued_tasks():
    from contract import sleep_then

    executor = hpcfutures.LocalExecutor(1)
    running = executor.submit(sleep_then, 0.5, "done")
    queued = [executor.submit(sleep_then, 0.5) for _ in range(10)]
    executor.shutdown(wait=True, cancel_futures=True)
    assert any(f.cancelled() for f in queued)
    assert all(f.done() for f in queued)
    assert running.done()


def test_executor_is_a_context_manager_returning_itself():
    with hpcfutures.LocalExecutor(1) as executor:
        assert isinstance(executor, hpcfutures.Executor)
        assert executor.role == "standalone"
        assert executor.submit(square, 3).result(timeout=30) == 9


def test_an_mpi_task_on_the_laptop_names_the_launches_with_an_mpi_world(ex):
    """Issue 20: the laptop's workers are no MPI world; submit and map say what gives one."""
    task = hpcfutures.mpi_task(square, ranks=2)
    for attempt in (lambda: ex.submit(task, 3), lambda: ex.map(task, [3])):
        with pytest.raises(hpcfutures.LauncherError,
                           match=r"single process.*mpiexec -n <N>.*srun --mpi=pmi2"):
            attempt()
