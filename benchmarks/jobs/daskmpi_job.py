"""dask-mpi, as its documentation shows it: ``mpiexec -n 4 python daskmpi_job.py``.

Rank 0 runs the scheduler, rank 1 this script's client code, the others are workers
(one thread each); everything binds to the loopback interface.  The client's exit shuts the
cluster down (dask-mpi's ``atexit`` hook).
"""

from dask_mpi import initialize

initialize(interface="lo", nthreads=1, dashboard=False)

from dask.distributed import Client  # noqa: E402

from benchmarks.workload import Recorder, report, run_workload, sizes_from_env  # noqa: E402

rec = Recorder()
with Client() as client:
    client.wait_for_workers(2)
    ex = client.get_executor(pure=False)  # impure, like concurrent.futures
    rec.mark("executor")
    run_workload(ex, rec, sizes=sizes_from_env(), chunksize_supported=False, raw_client=client)
    report(rec)
