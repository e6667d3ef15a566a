"""Parsl's ``ParslPoolExecutor`` (its ``concurrent.futures`` face) over a HighThroughputExecutor
on the local provider: ``python parsl_job.py``.

One block of one worker pool with 2 workers, started with the executor.  Everything listens on
and talks to 127.0.0.1: the client's ports (``loopback_address``), the interchange's worker
port and the address the pool connects to (``address``); usage tracking (which would send a
report elsewhere) is off, as it is by default.  Parsl starts the interchange and the pool as
the programs ``interchange.py`` and ``process_worker_pool.py`` found on ``PATH``: this Python's
own are put first.  Its run directory (logs) goes to the harness's per-run directory.
``ParslPoolExecutor.map`` ignores ``chunksize`` (its docstring says so), so the chunked maps
are not run.
"""

import os
import sys

from parsl.concurrent import ParslPoolExecutor
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

from benchmarks.workload import Recorder, report, run_workload, sizes_from_env


def config(run_dir: str) -> Config:
    htex = HighThroughputExecutor(
        label="htex_local",
        address="127.0.0.1",           # where the interchange listens and the pool connects
        loopback_address="127.0.0.1",  # where the client listens for the interchange
        max_workers_per_node=2,
        cores_per_worker=1,
        provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
        worker_logdir_root=run_dir,
    )
    return Config(executors=[htex], run_dir=run_dir, usage_tracking=0)


if __name__ == "__main__":
    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
    rec = Recorder()
    with ParslPoolExecutor(config(os.path.join(os.environ["BENCH_TMPDIR"], "runinfo"))) as ex:
        rec.mark("executor")
        run_workload(ex, rec, sizes=sizes_from_env(), chunksize_supported=False)
        report(rec)
