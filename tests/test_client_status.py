"""The launch's status is the client process's, under every launcher.

A script may catch what its executor block raised (save its partial results,
then end well): the other ranks still end when the client leaves the block,
and the launcher returns 0.  An exception that ends the program returns 1.
Under MPI nothing aborts the job while the client still runs Python code.
A worker rank that a call killed is the exception: ``srun`` and ``mpiexec``
report that rank's own status (its process is gone), ``hpcfutures run`` and the
laptop follow the client.  Job arrays: tests/test_sge.py and tests/test_slurm.py.
"""

from __future__ import annotations

import time

import pytest
from helpers import record_failure_time

ENDS_WITHIN = 30.0


def ended(launch, timeout: float = 90) -> tuple[int, str, str, float]:
    """The launcher's status, its output, and seconds from the block's raise to its return."""
    launch.out.wait_for("ABS 1", timeout)  # the block runs; it raises right after
    raised = time.monotonic()
    code = launch.finish(timeout)
    seconds = time.monotonic() - raised
    return code, launch.out.rest(10), launch.err.rest(10), seconds


@pytest.mark.timeout(120)
def test_a_caught_exception_lets_the_script_go_on_and_end_with_0(launcher, launches):
    launch = launches(launcher, 4, "caught_job.py", "exception")
    code, out, err, seconds = ended(launch)
    assert "CAUGHT ValueError" in out and "AFTER THE BLOCK" in out, launch
    assert code == 0, launch
    assert "MPI_Abort" not in err and "ending the launch with status" not in err, launch
    assert "failed first" not in err, launch  # hpcfutures run blames nobody
    record_failure_time("client code raises, script catches it: launch returns 0", launcher,
                        seconds)


@pytest.mark.timeout(120)
def test_an_exception_that_ends_the_program_ends_the_launch_with_1(launcher, launches):
    launch = launches(launcher, 4, "caught_job.py", "uncaught")
    code, out, err, seconds = ended(launch)
    assert "ValueError: handled below" in err and "AFTER THE BLOCK" not in out, launch
    assert code == 1, launch
    assert seconds < ENDS_WITHIN, launch
    if launcher == "run":
        assert "rank 1 (client) failed first" in err, launch


@pytest.mark.timeout(120)
def test_a_caught_worker_crash_ends_as_the_launcher_reports_it(launcher, launches):
    """The client catches the WorkerCrashError of a call that killed its worker (exit 3)."""
    launch = launches(launcher, 4, "caught_job.py", "crash")
    code, out, err, _ = ended(launch)
    if launcher == "mpiexec":
        # A dead rank cannot finalize MPI: the job ends with MPI_Abort and its status.
        assert code != 0 and "cannot finalize MPI" in err, launch
        return
    assert "CAUGHT WorkerCrashError" in out and "AFTER THE BLOCK" in out, launch
    if launcher == "srun":
        assert code == 3, launch  # srun returns the highest status of its tasks
        assert "reports every rank's status" in err, launch
    else:
        assert code == 0, launch
