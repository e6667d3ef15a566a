"""short_job.py with a setting that only the worker ranks (rank >= 2) get, and reject:
an interface their host does not have, as when nodes differ (start-up failure tests)."""

import os
import runpy
from pathlib import Path

RANK_VARIABLES = ("HPCFUTURES_RANK", "SLURM_PROCID", "PMI_RANK")
rank = next(int(os.environ[name]) for name in RANK_VARIABLES if name in os.environ)
if rank >= 2:
    os.environ["HPCFUTURES_INTERFACE"] = "nope0"
runpy.run_path(str(Path(__file__).with_name("short_job.py")), run_name="__main__")
