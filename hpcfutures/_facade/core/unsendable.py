"""Why a call could not be sent, in the words of the call its caller wrote.

Dask's error for a task that cannot be pickled names its own wrapper ("Could not
serialize object of type LLGExpr"); the user needs to hear which part of *their*
call it was (the function, positional argument 2, a map item's argument) and
what to pass instead.  Used by ``sending.py`` when Dask refuses a task.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from typing import Any

from ..._errors import SerializationError
from ..._remote.calls import Rows, pickling_error, run_chunk_task

__all__ = ["submission_error", "unpicklable_part"]


def unpicklable_part(runner: Callable[..., Any], fn: Callable[..., Any], args: tuple,
                     kwargs: dict) -> tuple[str, BaseException] | None:
    """Which part of a call cannot be pickled, named as its caller wrote it (the
    function, positional argument 2, keyword argument 'lock', a map item's
    argument), and cloudpickle's own error for it; None if each part pickles.

    Dask's error for the whole task names its own wrapper ("Could not serialize
    object of type LLGExpr"), which tells the user nothing about their call.
    """
    failure = pickling_error(fn)
    if failure is not None:
        return "function", failure
    if runner is run_chunk_task:
        chunk = args[0]
        rows = chunk.items if isinstance(chunk, Rows) else chunk
        spread = chunk.spread if isinstance(chunk, Rows) else True
        for row in rows:
            for position, value in enumerate(row if spread else (row,), start=1):
                failure = pickling_error(value)
                if failure is not None:
                    return f"map item's argument {position} ({_kind(value)})", failure
        return None
    for position, value in enumerate(args, start=1):
        failure = pickling_error(value)
        if failure is not None:
            return f"positional argument {position} ({_kind(value)})", failure
    for name, value in kwargs.items():
        failure = pickling_error(value)
        if failure is not None:
            return f"keyword argument {name!r} ({_kind(value)})", failure
    return None


def _kind(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return f"a {kind.__qualname__}"
    return f"a {kind.__module__}.{kind.__qualname__}"


def submission_error(fn: Callable[..., Any], err: Exception,
                     part: tuple[str, BaseException] | None = None) -> Exception:
    """Explain why a task could not even be sent (usually: it cannot be pickled)."""
    name = getattr(fn, "__qualname__", repr(fn))
    if isinstance(err, (cf.CancelledError, RuntimeError)) and "argument" in str(err):
        return err
    if part is not None:
        what, cause = part
        named = SerializationError(
            f"could not send task {name!r} to the cluster: its {what} cannot be pickled "
            f"({type(cause).__name__}: {cause}). A function and its arguments must be "
            "picklable with cloudpickle: pass plain data (numbers, strings, arrays, "
            "paths), and open files, locks, sockets or clients inside the function")
        named.__cause__ = cause
        return named
    wrapped = SerializationError(
        f"could not send task {name!r} to the cluster: {type(err).__name__}: {err}. "
        "The function and its arguments must be picklable with cloudpickle (no open "
        "files, locks, sockets or generators)"
    )
    wrapped.__cause__ = err
    return wrapped
