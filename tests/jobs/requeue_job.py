"""A sweep longer than its allocation: it drains before the time limit, requeues its
batch job, and the rerun resumes from the journal (the one-keyword recipe, plus requeue).

argv: OUT_DIR ITEMS SECONDS_PER_ITEM.  Every computation of an item leaves a marker
file ``OUT_DIR/markers/<item>.<unique>``; the results land in ``OUT_DIR/results``.
"""

import json
import os
import sys
import time
import uuid
from pathlib import Path

import hpcfutures


def work(item, markers, seconds):
    Path(markers, f"{item}.{uuid.uuid4().hex}").touch()
    time.sleep(seconds)  # the behaviour: work that takes time, not CPU
    return item * item


if __name__ == "__main__":
    out, items, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    (out / "markers").mkdir(exist_ok=True)
    # Runs so far: Slurm counts them, Grid Engine says 1 once the job was restarted.
    print("RUN", os.environ.get("SLURM_RESTART_COUNT") or os.environ.get("RESTARTED", "0"),
          flush=True)
    with hpcfutures.Executor(journal=str(out / "journal"), requeue=True) as ex:
        results = list(ex.map(work, range(items), [str(out / "markers")] * items,
                              [seconds] * items))
    (out / "results").write_text(json.dumps(results))
    print("DONE", time.time(), flush=True)
