"""The standard library's ProcessPoolExecutor with 2 workers: ``python processpool_job.py``."""

from concurrent.futures import ProcessPoolExecutor

from benchmarks.workload import Recorder, report, run_workload, sizes_from_env

if __name__ == "__main__":
    rec = Recorder()
    with ProcessPoolExecutor(2) as ex:
        rec.mark("executor")
        run_workload(ex, rec, sizes=sizes_from_env())
        report(rec)
