"""A job whose call starts a process and leaves it running (a helper it forgot)."""

import subprocess
import sys

import hpcfutures


def start_and_forget():
    # The behaviour under test: nothing waits for this process; it would run for
    # ten minutes, holding the launcher's output pipes.
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid


with hpcfutures.Executor() as ex:
    pid = ex.submit(start_and_forget).result()
    print("LEFT RUNNING", pid, flush=True)
print("CLIENT DONE", flush=True)
