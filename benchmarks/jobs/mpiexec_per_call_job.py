"""The same 2-rank no-op MPI call as hpcfutures_mpi_tasks_job.py, started with
``mpiexec -n 2`` per call: how tools that launch a job per MPI task run it.

    python mpiexec_per_call_job.py
"""

from benchmarks.workload import Recorder, report, run_mpiexec_per_call, sizes_from_env

rec = Recorder()
run_mpiexec_per_call(rec, sizes=sizes_from_env())
report(rec)
