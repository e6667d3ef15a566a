"""A job whose client raises inside the executor block."""

import hpcfutures

with hpcfutures.Executor() as ex:
    assert ex.submit(abs, -1).result() == 1
    print("RAISING", flush=True)
    raise RuntimeError("the client failed on purpose")
