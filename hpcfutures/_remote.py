"""What runs on the worker around the user's function.

Exceptions keep their own type; the formatted traceback, headed by where it
happened (rank and host), travels in the exception's ``__dict__`` (which pickle
preserves, unlike ``__cause__``) and becomes a :class:`RemoteTraceback`
``__cause__`` on the client, as with ``ProcessPoolExecutor``.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import traceback
from typing import Any, Callable

from ._errors import RemoteTraceback

__all__ = [
    "BundleOutcome", "ChunkOutcome", "pick", "restore_traceback", "run_bundle", "run_chunk",
    "run_chunk_task", "run_task", "set_location",
]

_TRACEBACK_ATTR = "_hpcfutures_remote_traceback"

#: "rank 3 on node12", set once when this process becomes a worker.
_location = f"process on {socket.gethostname()}"


def set_location(text: str) -> None:
    """Name this worker in the headers of remote tracebacks."""
    global _location
    _location = text


def _annotate(exc: BaseException) -> BaseException:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    header = f'\n"""\nTraceback from {_location}:\n'
    try:
        setattr(exc, _TRACEBACK_ATTR, f"{header}{text}\"\"\"")
    except AttributeError:  # exception types with __slots__ and no __dict__
        pass
    return exc


def restore_traceback(exc: BaseException) -> BaseException:
    """On the client: attach the worker's traceback as ``__cause__``."""
    text = getattr(exc, _TRACEBACK_ATTR, None)
    if text is not None:
        exc.__cause__ = RemoteTraceback(text)
        try:
            delattr(exc, _TRACEBACK_ATTR)
        except AttributeError:
            pass
    return exc


def run_task(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Call ``fn`` on the worker; a failure keeps its type and gains a traceback."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise _annotate(exc) from None


@dataclasses.dataclass
class ChunkOutcome:
    """The results of a chunk of ``map`` items, up to the first that raised."""

    values: list
    error: BaseException | None = None
    #: Seconds the chunk took on the worker: the client sizes later chunks by it.
    seconds: float = 0.0


def run_chunk(fn: Callable[..., Any], chunk: list[tuple]) -> ChunkOutcome:
    """Call ``fn`` on each argument tuple of a ``map`` chunk, in order.

    Stops at the first exception and returns it beside the results before it,
    so the client can yield those and raise at the right position.
    """
    started = time.perf_counter()
    values = []
    for args in chunk:
        try:
            values.append(fn(*args))
        except Exception as exc:
            return ChunkOutcome(values, _annotate(exc), time.perf_counter() - started)
    return ChunkOutcome(values, None, time.perf_counter() - started)


def run_chunk_task(fn: Callable[..., Any], args: tuple, kwargs: dict) -> ChunkOutcome:
    """The Dask task of a ``map`` chunk: ``args`` is ``(chunk,)``."""
    return run_chunk(fn, args[0])


@dataclasses.dataclass
class BundleOutcome:
    """The outcomes of several independent ``submit`` calls run as one Dask task.

    ``results[i]`` is ``(True, value)`` or ``(False, exception)``; ``seconds[i]``
    is how long call ``i`` took, which the client uses to size later bundles.
    """

    results: list
    seconds: list


def run_bundle(calls: list[tuple[Callable[..., Any], tuple, dict]]) -> BundleOutcome:
    """Run ``submit`` calls one after another; each succeeds or fails on its own."""
    results, seconds = [], []
    for fn, args, kwargs in calls:
        started = time.perf_counter()
        try:
            results.append((True, fn(*args, **kwargs)))
        except Exception as exc:
            results.append((False, _annotate(exc)))
        seconds.append(time.perf_counter() - started)
    return BundleOutcome(results, seconds)


def pick(outcome: BundleOutcome, index: int) -> Any:
    """One call's value out of a bundle (when its future becomes an argument)."""
    ok, value = outcome.results[index]
    if ok:
        return value
    raise value
