"""executorlib, with a block of 2 worker processes (``block_allocation=True``) or as it comes:

    python executorlib_job.py single            SingleNodeExecutor: 2 local worker processes
    salloc -n2 python executorlib_job.py slurm  SlurmJobExecutor: each worker an ``srun -n 1``
                                                step of the allocation
    python executorlib_job.py per-call          SingleNodeExecutor(2) by default: a new
                                                process for every call

The default's process per call (about 12 calls/s on 2 workers, 0.24 s a call one at a time)
would take the other steps' 6,200 calls 9 minutes or more, so that one runs only the first
task and 30 round trips.
``hostname_localhost=True`` makes the workers connect to ``localhost`` (127.0.0.1) rather than
to this host's name.  executorlib's ``map`` is ``concurrent.futures.Executor.map``, which
ignores ``chunksize``, so the chunked maps are not run.
"""

import sys

from executorlib import SingleNodeExecutor, SlurmJobExecutor

from benchmarks.workload import (
    Recorder,
    report,
    run_round_trips,
    run_workload,
    sizes_from_env,
)

#: kind -> (executor, block_allocation)
KINDS = {"single": (SingleNodeExecutor, True), "slurm": (SlurmJobExecutor, True),
         "per-call": (SingleNodeExecutor, False)}

if __name__ == "__main__":
    executor, block = KINDS[sys.argv[1]]
    rec = Recorder()
    with executor(max_workers=2, block_allocation=block, hostname_localhost=True) as ex:
        rec.mark("executor")
        if block:
            run_workload(ex, rec, sizes=sizes_from_env(), chunksize_supported=False)
        else:
            run_round_trips(ex, rec, sizes=sizes_from_env())
        report(rec)
