"""hpcfutures, one script for every launcher (the harness chooses how to start it):

    python hpcfutures_job.py                      laptop default: 2 local worker processes
    hpcfutures run -n 4 python hpcfutures_job.py  scheduler, client, 2 workers
    srun -n4 python hpcfutures_job.py
    mpiexec -n 4 python hpcfutures_job.py

``max_workers=2`` only matters for the laptop default; under a launcher the workers are the
ranks other than the scheduler and the client.  Needs the repository root on ``PYTHONPATH``
(for ``benchmarks.workload``), as the harness sets it.
"""

import hpcfutures
from benchmarks.workload import Recorder, report, run_workload, sizes_from_env

rec = Recorder()
with hpcfutures.Executor(2) as ex:
    rec.mark("executor")
    run_workload(ex, rec, sizes=sizes_from_env(), large_default=True)
    report(rec)
