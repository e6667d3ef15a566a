"""A worker's GPUs, handed to the calls that asked for them while they run.

The worker declares how many GPUs it owns to Dask (a worker resource), so
Dask never starts more calls that asked for GPUs than it has free; this
module decides *which* ones each call gets.  While a call holds them, the
vendor variables (``CUDA_VISIBLE_DEVICES`` and its twins, as the worker's
launcher set them) name exactly its GPUs, and :func:`current_gpus` returns
them.  The variables belong to the whole process: where one worker owns
several GPUs and runs several calls at once, a call's own GPUs are the ones
:func:`current_gpus` names (it is exact per thread), and the variables are
the last call's.  One GPU per worker rank (the default split) has no such
doubt.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence

__all__ = ["current_gpus", "holding", "install"]

_lock = threading.Lock()
_free: list[str] = []
_all: tuple[str, ...] = ()
_variables: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
_held = threading.local()
#: Calls holding GPUs in this process now (the variables go back to the worker's
#: own GPUs when the last one ends).
_holders = 0


def install(ids: Sequence[str], variables: Sequence[str], own: bool = True) -> None:
    """This worker process sees ``ids`` (``variables`` name them from now on), and hands
    them to the calls that ask for GPUs if they are its ``own`` (not shared with
    other ranks)."""
    global _all, _variables
    with _lock:
        _all = tuple(ids)
        _free[:] = list(ids) if own else []
        _variables = tuple(variables) or ("CUDA_VISIBLE_DEVICES",)
    if ids:
        _pin(_all)


def _pin(ids: Sequence[str]) -> None:
    text = ",".join(ids)
    for name in _variables:
        os.environ[name] = text


def current_gpus() -> tuple[str, ...]:
    """The GPUs of the call running in this thread, as ``CUDA_VISIBLE_DEVICES`` names them.

    In a call submitted with ``hpcfutures.task(fn, gpus=N)``: its N GPUs, which
    no other running call holds.  In any other call on a worker: the GPUs of
    that worker (possibly none).  On the client: the GPUs its environment names.
    """
    held = getattr(_held, "ids", None)
    if held is not None:
        return held
    if _all:
        return _all
    from .._support.gpus import visible_gpus

    return tuple(visible_gpus(os.environ)[0])


@contextlib.contextmanager
def holding(count: int) -> Iterator[tuple[str, ...]]:
    """Take ``count`` of this worker's free GPUs for the call inside (this thread).

    Dask started the call only if that many are free; a call run outside
    (directly, or nested in another call) takes what is free, and runs with
    its enclosing GPUs where none is.
    """
    global _holders
    if count <= 0 or getattr(_held, "ids", None) is not None:
        yield current_gpus()
        return
    with _lock:
        if len(_free) < count:
            taken: tuple[str, ...] = ()
        else:
            taken = tuple(_free[:count])
            del _free[:count]
            _holders += 1
            _pin(taken)
    if not taken:
        yield current_gpus()
        return
    _held.ids = taken
    try:
        yield taken
    finally:
        _held.ids = None
        with _lock:
            _free.extend(taken)
            _free.sort(key=_all.index)
            _holders -= 1
            if _holders == 0:
                _pin(_all)
