"""dask-jobqueue's SLURMRunner, as its documentation shows it::

    srun -n4 python slurmrunner_job.py

Rank 0 runs the scheduler, rank 1 this script's client code, the others are workers; the
scheduler's address travels through a scheduler file in the harness's per-run directory
(``BENCH_TMPDIR``).  Scheduler and workers bind to 127.0.0.1, one thread per worker.
"""

import os

from dask.distributed import Client
from dask_jobqueue.slurm import SLURMRunner

from benchmarks.workload import Recorder, report, run_workload, sizes_from_env

rec = Recorder()
runner = SLURMRunner(
    scheduler_file=os.path.join(os.environ["BENCH_TMPDIR"], "scheduler-{job_id}.json"),
    scheduler_options={"host": "127.0.0.1", "dashboard": False},
    worker_options={"host": "127.0.0.1", "nthreads": 1},
)
with runner:
    with Client(runner) as client:
        client.wait_for_workers(runner.n_workers)
        ex = client.get_executor(pure=False)  # impure, like concurrent.futures
        rec.mark("executor")
        run_workload(ex, rec, sizes=sizes_from_env(), chunksize_supported=False,
                     raw_client=client)
        report(rec)
