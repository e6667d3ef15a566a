"""A job whose task tries to open an executor of its own (nested-executor tests)."""

import time

import hpcfutures


def nested():
    with hpcfutures.Executor() as inner:
        return inner.submit(abs, -1).result()


with hpcfutures.Executor() as ex:
    assert ex.submit(abs, -1).result() == 1
    started = time.monotonic()
    try:
        ex.submit(nested).result(timeout=120)
    except hpcfutures.NestedExecutorError as err:
        print(f"NESTED REFUSED in {time.monotonic() - started:.2f} s: {err}", flush=True)
    assert ex.submit(abs, -2).result() == 2
    print("STILL USABLE", flush=True)
