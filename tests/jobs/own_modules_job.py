"""A client whose functions come from modules only it can import (issue 27).

    hpcfutures run -n 3 python tests/jobs/own_modules_job.py FOLDER
    srun -n 3 python3 tests/jobs/own_modules_job.py FOLDER

FOLDER holds ``hpcf_own_tool.py``, which imports ``hpcf_own_util.py`` from the
same folder (tests/test_own_modules.py writes them).  Only the client puts
FOLDER on its ``sys.path``, inside the executor's block, where the other ranks
never get: the workers cannot import either module.  Prints "OWN RESULT ..."
lines; exit status 0 when all passed.
"""

import os
import sys

import hpcfutures


def on_the_worker(folder):
    """Where the call ran, and whether the worker could have imported the modules."""
    return os.getpid(), folder in sys.path, "hpcf_own_tool" in sys.modules


folder = sys.argv[1]
failed = 0
with hpcfutures.Executor() as ex:
    sys.path.insert(0, folder)  # the client's alone
    import hpcf_own_tool  # imports hpcf_own_util from FOLDER

    checks = {
        "module_function": list(ex.map(hpcf_own_tool.scaled, range(5))) == [1, 4, 7, 10, 13],
        "main_function_using_it": ex.submit(lambda x: hpcf_own_tool.scaled(x) * 2, 2).result(
            timeout=60) == 14,
    }
    pid, had_folder, imported = ex.submit(on_the_worker, folder).result(timeout=60)
    checks["ran_elsewhere_without_the_folder"] = pid != os.getpid() and not had_folder \
        and not imported
    for name, ok in checks.items():
        print(f"OWN RESULT {'PASS' if ok else 'FAIL'} {name}", flush=True)
        failed += not ok
sys.exit(1 if failed else 0)
