"""A job whose client is done at once: one call, then it says when it left its code."""

import time

import hpcfutures

with hpcfutures.Executor() as ex:
    assert ex.submit(abs, -1).result() == 1
    print(f"CLIENT DONE {time.time():.3f}", flush=True)
