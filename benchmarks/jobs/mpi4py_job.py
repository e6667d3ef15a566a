"""mpi4py.futures with the workers of COMM_WORLD:

    mpiexec -n 3 python -m mpi4py.futures mpi4py_job.py     (rank 0 runs this, 2 workers)
"""

from mpi4py.futures import MPIPoolExecutor

from benchmarks.workload import Recorder, report, run_workload, sizes_from_env

if __name__ == "__main__":
    rec = Recorder()
    with MPIPoolExecutor() as ex:
        ex.bootup()  # the pool starts lazily; this waits until its workers answer
        rec.mark("executor")
        run_workload(ex, rec, sizes=sizes_from_env())
        report(rec)
