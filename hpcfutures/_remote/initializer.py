"""A worker's initializer, run once before its first call (``initializer=``, ``initargs=``).

::

    client   Executor(initializer=f, initargs=a): pack(f, a) with cloudpickle, at once
             (an unpicklable one is a SerializationError in the constructor)
    workers  a Dask worker plug-in (hpcfutures._dask.initializer) calls run_initializer()
             on every worker, also on those that join later, before it takes a task
    failure  the worker remembers it: every call sent there fails (refuse_if_failed);
             the client hears of it and breaks the executor, caused by that exception

As with ``ProcessPoolExecutor`` the initializer runs once per worker process,
and no call runs in a process where it raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

from .._errors import BrokenHPCExecutor, SerializationError
from .namespaces import shared
from .tracebacks import _annotate, restore_traceback

__all__ = [
    "failure_report", "pack_initializer", "refuse_if_failed", "restore_failure",
    "run_initializer",
]

#: The exception this worker's initializer raised (annotated for the client), if any.
_failure: BaseException | None = None


def pack_initializer(initializer: Callable[..., Any], initargs: Iterable[Any]) -> bytes:
    """``(initializer, initargs)`` pickled for the workers, or a SerializationError now."""
    try:
        return cloudpickle.dumps((initializer, tuple(initargs)))
    except Exception as err:
        name = getattr(initializer, "__qualname__", repr(initializer))
        raise SerializationError(
            f"the initializer {name!r} or its initargs could not be pickled to send them to "
            f"the workers: {type(err).__name__}: {err}. They must be picklable with "
            "cloudpickle (no open files, locks, sockets or generators)") from err


def run_initializer(payload: bytes) -> bytes | None:
    """Run the initializer in this worker; its exception, pickled, if it raised.

    The exception is also kept, so that no call runs here afterwards.
    """
    global _failure
    try:
        initializer, initargs = cloudpickle.loads(payload)
        shared(initializer)(*initargs)  # its globals are the calls' (namespaces.py)
    except BaseException as err:
        _failure = _annotate(err)
        return failure_report()
    return None


def failure_report() -> bytes | None:
    """The pickled exception of this worker's initializer, or None (asked by the client)."""
    return None if _failure is None else cloudpickle.dumps(_failure)


def refuse_if_failed() -> None:
    """Raise instead of running a call in a worker whose initializer failed."""
    if _failure is not None:
        raise BrokenHPCExecutor(
            f"this worker's initializer raised {type(_failure).__name__}: {_failure}; no "
            "call runs here")


def restore_failure(report: bytes) -> BaseException:
    """On the client: the initializer's exception, with the worker's traceback as cause."""
    try:
        error = cloudpickle.loads(report)
    except Exception as err:  # e.g. its class cannot be imported here
        return RuntimeError(f"the initializer raised an exception that cannot be unpickled "
                            f"on the client: {type(err).__name__}: {err}")
    return restore_traceback(error)
