"""A job whose client runs one task, prints READY, and waits until the test says go.

The test looks at the launch meanwhile (what its ranks listen on, say); it
says go by creating the file named by HPCFUTURES_TEST_GO.
"""

import os
import time

import hpcfutures

go = os.environ["HPCFUTURES_TEST_GO"]
with hpcfutures.Executor() as ex:
    assert ex.submit(abs, -2).result() == 2
    print("READY", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the test, not for the launch
    print("DONE", flush=True)
