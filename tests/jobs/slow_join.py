"""A Dask worker preload that holds one rank back just before it registers.

Given as DASK_DISTRIBUTED__WORKER__PRELOAD; the rank is HPCFUTURES_TEST_SLOW_RANK
(as the launcher numbers it), or the worker's name HPCFUTURES_TEST_SLOW_NAME (a local
worker of the laptop default: ``local-1``), the delay HPCFUTURES_TEST_SLOW_JOIN
seconds: a worker that joins as the launch ends, or after.
"""

import asyncio
import os

RANK_VARIABLES = ("PMI_RANK", "SLURM_PROCID", "HPCFUTURES_RANK")


async def dask_setup(worker):
    rank = next((os.environ[name] for name in RANK_VARIABLES if name in os.environ), None)
    slow_rank, slow_name = (os.environ.get(f"HPCFUTURES_TEST_SLOW_{what}")
                            for what in ("RANK", "NAME"))
    if (rank is not None and rank == slow_rank) or (slow_name and worker.name == slow_name):
        await asyncio.sleep(float(os.environ["HPCFUTURES_TEST_SLOW_JOIN"]))  # the behaviour
