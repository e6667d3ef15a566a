"""What runs on each member of an MPI task: for each call, build its communicator, call, free.

The members of one group of calls (one call from ``submit``, several
consecutive items of a ``map``) run :func:`run_members` at about the same
time, one per reserved worker (the scheduler reserved them together, see
``_dask/mpigroups.py``)::

    member i, once: wait for the others without spinning (meet)
    then for each call of the group, in order:
        a new communicator of the group's world ranks (MPI_Comm_create_group,
        only the members take part) -> fn(comm, *args, **kwargs)
        -> free the communicator -> value, or the exception raised
    -> the outcomes of every call (a BundleOutcome)

No communicator outlives its call.  Only member 0's values travel (the
calls' results); the others keep just their exceptions.  A call that raises
on a member of a group of several is told to the client at once (an event),
before the member goes on with the group's next call: the other members may
wait for it inside MPI forever, and the user hears of the error anyway.
Each exception's traceback is headed by this worker's rank and host (see
:mod:`.calls`); the client names the member.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from .._support.mpi import group_communicator, meet
from .calls import BundleOutcome, run_task
from .tracebacks import _TRACEBACK_ATTR

__all__ = ["raised_by_the_call", "run_members"]


class _WithCommunicator:
    """``fn(comm, *args, **kwargs)``, under ``fn``'s name (the worker records which
    function runs); on members other than 0 its value is dropped at once."""

    def __init__(self, fn: Callable[..., Any], comm: Any, keep: bool) -> None:
        self.fn, self.comm, self.keep = fn, comm, keep
        self.__qualname__ = getattr(fn, "__qualname__", type(fn).__qualname__)
        self.__module__ = getattr(fn, "__module__", None) or __name__

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(self.comm, *args, **kwargs)
        return value if self.keep else None


def run_members(fn: Callable[..., Any], calls: Sequence[tuple[tuple, dict]],
                world_ranks: Sequence[int], tag: int, member: int, group: str) -> BundleOutcome:
    """Run member ``member`` of each call of one group, in order.

    ``calls`` holds each call's ``(args, kwargs)``; ``group`` names the group
    in the event that tells the client of a call that raised here.
    """
    results: list = []
    seconds: list = []
    meet(world_ranks, tag)  # the members' tasks start at different times: wait gently
    for index, (args, kwargs) in enumerate(calls):
        started = time.perf_counter()
        comm = group_communicator(world_ranks, tag)
        try:  # run_task refuses the call where the initializer failed, and annotates errors
            results.append((True, run_task(_WithCommunicator(fn, comm, member == 0),
                                           args, kwargs)))
        except Exception as err:
            results.append((False, err))
            if len(world_ranks) > 1:
                _tell(group, index, member, err)
        finally:
            comm.Free()
        seconds.append(time.perf_counter() - started)
    return BundleOutcome(results, seconds)


def _tell(group: str, index: int, member: int, error: BaseException) -> None:
    """Tell the client now that call ``index`` of ``group`` raised on this member."""
    from .. import _dask

    try:
        packed = cloudpickle.dumps(error)
    except Exception:  # its outcome says why, once the group ends
        return
    _dask.tell_call_failed(group, index, member, packed)


def raised_by_the_call(error: BaseException) -> bool:
    """On the client: whether a member's error came from the call (``run_task``
    annotated it), not from the loss of the member's worker."""
    return hasattr(error, _TRACEBACK_ATTR)
