"""The contract suite as a job: start it with any launcher.

    hpcfutures run -n 3 python tests/jobs/contract_job.py
    srun -n4 python tests/jobs/contract_job.py
    mpiexec -n 4 python tests/jobs/contract_job.py

Only the client runs the checks; it prints PASS/FAIL lines and
"CONTRACT RESULT passed=<n> failed=<m>", then checks that ``submit`` after
``shutdown`` raises.  Exit status: 0 when everything passed.
Options come from the environment (HPCFUTURES_*), so one script serves all.
CONTRACT_CHECKS=name,name... runs only those checks (quick end-to-end runs).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from contract import CHECKS, run_all, square

import hpcfutures

if os.environ.get("CONTRACT_LOG_INFO"):  # tests that watch hpcfutures' own decisions
    import logging

    logging.getLogger("hpcfutures").setLevel(logging.INFO)

only = [name for name in os.environ.get("CONTRACT_CHECKS", "").split(",") if name]
unknown = sorted(set(only) - {fn.__name__ for fn in CHECKS})
if unknown:
    sys.exit(f"CONTRACT_CHECKS names unknown checks: {', '.join(unknown)}")
executor = hpcfutures.Executor()
with executor as ex:
    failed = run_all(ex, names=only or None, out=lambda line: print(line, flush=True))
try:
    executor.submit(square, 1)
except RuntimeError:
    print("PASS submit_after_shutdown_raises", flush=True)
else:
    failed += 1
    print("FAIL submit_after_shutdown_raises", flush=True)
print(f"CONTRACT RESULT passed={len(only or CHECKS) + 1 - failed} failed={failed}", flush=True)
sys.exit(1 if failed else 0)
