"""A Dask worker preload that holds one rank back just before it registers.

Given as DASK_DISTRIBUTED__WORKER__PRELOAD; the rank is HPCFUTURES_TEST_SLOW_RANK
(as the launcher numbers it), the delay HPCFUTURES_TEST_SLOW_JOIN seconds: a
worker that joins as the launch ends, or after.
"""

import asyncio
import os

RANK_VARIABLES = ("PMI_RANK", "SLURM_PROCID", "HPCFUTURES_RANK")


async def dask_setup(worker):
    rank = next((os.environ[name] for name in RANK_VARIABLES if name in os.environ), None)
    if rank == os.environ.get("HPCFUTURES_TEST_SLOW_RANK"):
        await asyncio.sleep(float(os.environ["HPCFUTURES_TEST_SLOW_JOIN"]))  # the behaviour
