"""What runs on each member of an MPI task: build its communicator, call, free.

Every member worker of one call runs :func:`run_member` at about the same
time (the scheduler reserved them together, see ``_dask/mpigroups.py``)::

    member i:  communicator of the call's world ranks (MPI_Comm_create_group,
               only the members take part) -> fn(comm, *args, **kwargs)
               -> free the communicator -> value, or the exception raised

Only member 0's value is fetched by the client (the call's result); the
others return ``None``.  A member's exception is the Dask task's error, its
traceback headed by this worker's rank and host (see :mod:`.calls`); Dask
streams it to the client with the task's end, which then names the member.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._support.mpi import group_communicator
from .calls import _TRACEBACK_ATTR, run_task

__all__ = ["raised_by_the_call", "run_member"]


class _WithCommunicator:
    """``fn(comm, *args, **kwargs)``, under ``fn``'s name (the worker records which
    function runs); on members other than 0 its value is dropped at once."""

    def __init__(self, fn: Callable[..., Any], comm: Any, keep: bool) -> None:
        self.fn, self.comm, self.keep = fn, comm, keep
        self.__qualname__ = getattr(fn, "__qualname__", type(fn).__qualname__)
        self.__module__ = getattr(fn, "__module__", None) or __name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(self.comm, *args, **kwargs)
        return value if self.keep else None


def run_member(fn: Callable[..., Any], args: tuple, kwargs: dict, world_ranks: Sequence[int],
               tag: int, member: int) -> Any:
    """Run member ``member`` of one MPI task; its value (None but on member 0)."""
    comm = group_communicator(world_ranks, tag)
    try:  # run_task refuses the call where the initializer failed, and annotates errors
        return run_task(_WithCommunicator(fn, comm, member == 0), args, kwargs)
    finally:
        comm.Free()


def raised_by_the_call(error: BaseException) -> bool:
    """On the client: whether a member's error came from the call (``run_task``
    annotated it), not from the loss of the member's worker."""
    return hasattr(error, _TRACEBACK_ATTR)
