"""A job with exit_when_done=False: every rank comes back from the block."""

import os
import sys

import hpcfutures

executor = hpcfutures.Executor(exit_when_done=False)
with executor as ex:
    if ex is not None:
        print("RESULT", sum(ex.map(abs, range(-5, 0))), flush=True)
sys.stdout.write(f"AFTER rank={os.environ['HPCFUTURES_RANK']} role={executor.role} "
      f"client={ex is not None}\n")
sys.stdout.flush()
