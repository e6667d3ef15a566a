"""One call in a launch's executor, then a second Executor() after the block: its class."""

import hpcfutures

with hpcfutures.Executor() as ex:
    assert ex.submit(abs, -1).result() == 1
try:
    hpcfutures.Executor()
except Exception as err:
    print(f"SECOND {type(err).__name__}: {err}", flush=True)
else:
    print("SECOND accepted", flush=True)
