"""Cubed arrays on a Slurm allocation: a correlation matrix, chunk by chunk.

    srun -n4 python examples/cubed_slurm.py        # rank 0 scheduler, 1 this script, 2-3 workers
    python examples/cubed_slurm.py                 # the same on a laptop: local workers

Needs ``pip install hpcfutures[cubed]``.  Cubed keeps its intermediate chunks
in a work directory that every worker must see: ``CUBED_WORK_DIR`` if set,
else a fresh directory under the current one (on a cluster, usually a shared
filesystem), removed at the end.

The hpcfutures executor is opened once and serves both ``compute()`` calls;
Cubed checks its ``allowed_mem`` against the workers' memory limits, and a
callback reports the tasks as they finish.
"""

import contextlib
import os
import tempfile
import time

import cubed
import cubed.array_api as xp
import numpy as np
from cubed.runtime.types import Callback

import hpcfutures
from hpcfutures.cubed import HPCFuturesDagExecutor


class TaskReport(Callback):
    """Counts finished tasks per computation and prints one line for each."""

    def on_compute_start(self, event):
        self.tasks, self.started = 0, time.monotonic()

    def on_task_end(self, event):
        self.tasks += event.num_tasks

    def on_compute_end(self, event):
        print(f"  {self.tasks} tasks in {time.monotonic() - self.started:.2f} s")


def correlation(x, n_rows):
    """Pearson correlation of the columns of ``x``, as a lazy Cubed array."""
    centred = x - xp.mean(x, axis=0)
    z = centred / xp.sqrt(xp.mean(centred * centred, axis=0))
    return xp.matmul(xp.matrix_transpose(z), z) / n_rows


def work_directory():
    """CUBED_WORK_DIR, or a temporary directory here (made by the client only)."""
    if os.environ.get("CUBED_WORK_DIR"):
        return contextlib.nullcontext(os.environ["CUBED_WORK_DIR"])
    return tempfile.TemporaryDirectory(prefix="cubed-", dir=".")


def main() -> None:
    data = np.random.default_rng(seed=42).normal(size=(600, 40))
    with hpcfutures.Executor() as ex, work_directory() as work_dir:
        workers = ex.worker_memory_limits()
        print(f"{len(workers)} workers; each task may use up to "
              f"{min(w.per_task for w in workers.values()) / 1e9:.1f} GB")
        spec = cubed.Spec(work_dir=work_dir, allowed_mem="200MB",
                          executor=HPCFuturesDagExecutor(ex))
        x = xp.asarray(data, chunks=(100, 20), spec=spec)

        print("column means and maxima:")
        means, maxima = cubed.compute(xp.mean(x, axis=0), xp.max(x, axis=0),
                                      callbacks=[TaskReport()])
        print("correlation matrix:")
        corr = correlation(x, data.shape[0]).compute(callbacks=[TaskReport()])

    ok = (np.allclose(means, data.mean(axis=0)) and np.allclose(maxima, data.max(axis=0))
          and np.allclose(corr, np.corrcoef(data, rowvar=False)))
    if not ok:
        raise SystemExit("the results do not match NumPy")
    print(f"all results match NumPy (largest off-diagonal correlation "
          f"{np.abs(corr - np.eye(len(corr))).max():.3f})")


if __name__ == "__main__":
    main()
