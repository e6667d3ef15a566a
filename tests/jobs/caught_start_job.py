"""bad_worker_job.py in a script that catches every error around its ``with`` block and
goes on: a rank that failed to start must leave, never run the code after the block
(only the client does)."""

import os

RANK_VARIABLES = ("HPCFUTURES_RANK", "SLURM_PROCID", "PMI_RANK")
rank = next(int(os.environ[name]) for name in RANK_VARIABLES if name in os.environ)
if rank >= 2:
    os.environ["HPCFUTURES_INTERFACE"] = "nope0"

import hpcfutures  # noqa: E402  (after the setting: workers read it as they start)

try:
    with hpcfutures.Executor() as ex:
        ex.submit(abs, -1).result()
except Exception as err:
    print(f"AFTER THE BLOCK rank {rank}: {type(err).__name__}", flush=True)
