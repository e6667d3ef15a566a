"""A Cubed job for tests/test_cubed.py: ``python tests/jobs/cubed_job.py WORK_DIR``.

Only the client runs the checks; each prints one line the test reads:

* ``SUM OK`` / ``MEAN OK`` / ``MATMUL OK``: two compute() calls on one executor
  (the second computes two arrays at once), compared with NumPy
* ``CALLBACKS starts=2 ends=2 tasks=N``: Cubed's callbacks fired
* ``RETRY OK``: every block of a map_blocks failed once and was retried
* ``MEMORY workers=W limits=L``: what the workers reported, once CUBED_JOB_WORKERS
  (default 1) have joined
* ``REFUSED ConfigurationError`` if ``CUBED_JOB_TOO_MUCH`` (bytes) is set and
  that allowed_mem is refused before anything runs
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import cubed
import cubed.array_api as xp
from cubed.runtime.types import Callback
from waiting import workers_joined

import hpcfutures
from hpcfutures.cubed import HPCFuturesDagExecutor

WORK = Path(sys.argv[1])


class Counter(Callback):
    def __init__(self):
        self.starts = self.ends = self.tasks = 0

    def on_compute_start(self, event):
        self.starts += 1

    def on_compute_end(self, event):
        self.ends += 1

    def on_task_end(self, event):
        self.tasks += event.num_tasks


def fail_once_then_add_one(block):
    """Fails the first time it sees a block (marker files in the shared work dir)."""
    marker = WORK / "attempts" / f"{int(block.flat[0])}"
    marker.parent.mkdir(exist_ok=True)
    if not marker.exists():
        marker.touch()
        raise RuntimeError(f"first attempt at the block starting with {block.flat[0]}")
    return block + 1


def main():
    with hpcfutures.Executor() as ex:
        spec = cubed.Spec(work_dir=str(WORK / "cubed"), allowed_mem="200MB",
                          executor=HPCFuturesDagExecutor(ex))
        a_np = np.arange(12 * 10, dtype=np.float64).reshape(12, 10)
        b_np = np.linspace(0, 1, 10 * 6).reshape(10, 6)
        a = xp.asarray(a_np, chunks=(4, 5), spec=spec)
        b = xp.asarray(b_np, chunks=(5, 3), spec=spec)
        counter = Counter()

        total = xp.sum(a, axis=0).compute(callbacks=[counter])
        print("SUM OK" if np.allclose(total, a_np.sum(axis=0)) else f"SUM WRONG {total}")
        mean, product = cubed.compute(xp.mean(a, axis=1), xp.matmul(a, b),
                                      callbacks=[counter])
        print("MEAN OK" if np.allclose(mean, a_np.mean(axis=1)) else f"MEAN WRONG {mean}")
        print("MATMUL OK" if np.allclose(product, a_np @ b_np) else "MATMUL WRONG")
        print(f"CALLBACKS starts={counter.starts} ends={counter.ends} tasks={counter.tasks}")

        flaky = cubed.map_blocks(fail_once_then_add_one, a, dtype=a.dtype)
        retried = flaky.compute()
        attempts = len(list((WORK / "attempts").iterdir()))
        ok = np.array_equal(retried, a_np + 1) and attempts == 6
        print("RETRY OK" if ok else f"RETRY WRONG attempts={attempts}")

        memory = workers_joined(ex, int(os.environ.get("CUBED_JOB_WORKERS", "1")))
        limits = sorted({m.limit for m in memory.values()}, key=str)
        print(f"MEMORY workers={len(memory)} limits={limits}")

        too_much = os.environ.get("CUBED_JOB_TOO_MUCH")
        if too_much:
            greedy = cubed.Spec(work_dir=str(WORK / "cubed"), allowed_mem=int(too_much),
                                executor=HPCFuturesDagExecutor(ex))
            try:
                xp.sum(xp.asarray(a_np, chunks=(4, 5), spec=greedy)).compute()
                print("NOT REFUSED")
            except hpcfutures.ConfigurationError as err:
                print(f"REFUSED {type(err).__name__}: {err}")
        # The allocation is still ours after all of that.
        print("STILL USABLE", ex.submit(sum, [1, 2, 3]).result(timeout=30))


if __name__ == "__main__":
    main()
