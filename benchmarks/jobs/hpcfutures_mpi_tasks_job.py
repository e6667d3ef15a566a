"""MPI tasks through hpcfutures (issue 20): 2-rank no-op calls on 2 worker ranks.

    mpiexec -n 4 python hpcfutures_mpi_tasks_job.py

Rank 0 is the scheduler, rank 1 the client, ranks 2 and 3 the workers; each call reserves
both and runs ``workload.mpi_noop`` on a communicator of the two.  Needs the repository
root on ``PYTHONPATH`` (for ``benchmarks.workload``), as the harness sets it.
"""

import hpcfutures
from benchmarks.workload import Recorder, report, run_mpi_calls, sizes_from_env

rec = Recorder()
with hpcfutures.Executor() as ex:
    rec.mark("executor")
    run_mpi_calls(ex, rec, sizes=sizes_from_env(), mpi_task=hpcfutures.mpi_task)
    report(rec)
