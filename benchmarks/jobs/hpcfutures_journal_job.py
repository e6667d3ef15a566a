"""hpcfutures with a result journal (``journal=``), laptop default with 2 workers:

    python hpcfutures_journal_job.py

The cost of recording (a 10 ms map with a journal against the same map without) and the gain
of a rerun that finds every call recorded; see ``run_journal_workload``.  The journal lives in a
temporary directory, removed at the end.  Needs the repository root on ``PYTHONPATH``.
"""

import functools
import tempfile

import hpcfutures
from benchmarks.workload import Recorder, report, run_journal_workload, sizes_from_env

rec = Recorder()
rec.mark("executor")
with tempfile.TemporaryDirectory(prefix="hpcfutures-bench-journal-") as directory:
    run_journal_workload(functools.partial(hpcfutures.Executor, 2), rec, directory,
                         sizes=sizes_from_env())
report(rec)
