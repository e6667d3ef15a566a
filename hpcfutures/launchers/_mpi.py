"""MPI for the launch itself, started only once the MPI launcher is used.

Initialising MPI has consequences for the whole process (a collective
``MPI_Finalize`` at exit, a launcher that kills the job when a rank leaves
without it), so importing hpcfutures or detecting a launcher never does it:
:func:`world` does, on first use by :class:`~hpcfutures.launchers.mpi.MPILauncher`.

MPI's blocking calls cannot be interrupted, and hpcfutures never waits
without a deadline, so every wait here is a non-blocking request tested with
capped back-off until it completes or the deadline passes::

    world()              initialise MPI (thread level >= serialized); abort the
                         job on an uncaught exception from then on
    Broadcast.send       root:   Ibcast(length) + Ibcast(payload), wait
    Broadcast.receive    others: Ibcast(length), then Ibcast(payload), wait
    finalize_together    Ibarrier with a deadline, then MPI_Finalize
    exit_process         leave through C's exit(), which MPICH needs after Finalize
    abort                MPI_Abort(COMM_WORLD): the launcher ends every rank
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import time
from typing import Any, NoReturn

from .._errors import LaunchEndedError, LauncherError
from .._support.backoff import Backoff
from .._support.mpi import mpi_module

__all__ = ["Broadcast", "DeadlinePassed", "abort", "exit_process", "finalize_together",
           "is_active", "world", "world_facts"]

#: Requests that did not complete before their deadline, with their buffers:
#: MPI may still write into a buffer, so it must outlive the Python call.
_abandoned: list[Any] = []
_hook_installed = False
#: Seconds between the last words of an aborting rank and MPI_Abort.
OUTPUT_GRACE = 0.5


class DeadlinePassed(Exception):
    """A non-blocking MPI operation did not complete before its deadline."""


#: Whether hpcfutures finalized MPI in this process (at the end of a launch).
_finalized_here = False


def _mpi() -> Any:
    """The ``mpi4py.MPI`` module (importing it initialises MPI, unless the user said not to)."""
    return mpi_module()


def world() -> Any:
    """``COMM_WORLD``, initialising MPI on first use."""
    MPI = _mpi()
    if MPI.Is_finalized():
        if _finalized_here:  # the end of this process's first executor's launch
            raise LaunchEndedError(
                "this process already was part of an MPI launch, which ended with its "
                "executor (MPI is finalized): a launch serves one executor, and its other "
                "ranks exit when that executor shuts down. Do all the work of a launch "
                "inside one `with Executor() as ex:` block (or pass that executor around), "
                "or start a new launch for the next one")
        raise LauncherError("MPI was finalized in this process before hpcfutures could "
                            "use it: create the executor before MPI.Finalize()")
    if not MPI.Is_initialized():  # the user set mpi4py.rc.initialize = False
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    _install_abort_on_uncaught_exception()
    level = MPI.Query_thread()
    if level < MPI.THREAD_SERIALIZED:
        raise LauncherError(
            f"MPI was initialised with thread level {level}, but hpcfutures calls MPI from "
            "its event-loop thread and needs MPI_THREAD_SERIALIZED or more: leave "
            "mpi4py.rc.thread_level at its default ('multiple')"
        )
    return MPI.COMM_WORLD


def world_facts() -> tuple[int, int, str]:
    """(rank, size, first line of the MPI library's version) of ``COMM_WORLD``."""
    comm = world()
    library = " ".join(_mpi().Get_library_version().strip().splitlines()[0].split())
    return comm.Get_rank(), comm.Get_size(), library


def is_active() -> bool:
    """Whether this process uses MPI now (initialised and not yet finalized)."""
    MPI = sys.modules.get("mpi4py.MPI")
    return MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized()


def _wait(request: Any, deadline: float, keep: Any) -> None:
    """Test ``request`` until it completes; DeadlinePassed at ``deadline``."""
    backoff = Backoff()
    while not request.Test():
        if time.monotonic() >= deadline:
            _abandoned.append((request, keep))
            raise DeadlinePassed
        backoff.sleep(deadline)


class Broadcast:
    """Bytes from ``root`` to every rank of ``COMM_WORLD``, with a deadline.

    Two broadcasts, because the receivers must know a buffer's size before
    they can post it: first the length (8 bytes), then the payload.
    """

    def __init__(self, root: int) -> None:
        self.root = root

    def send(self, payload: bytes, deadline: float) -> None:
        """On ``root``: post both broadcasts and wait until MPI is done with the buffers."""
        comm, MPI = world(), _mpi()
        header = bytearray(len(payload).to_bytes(8, "little"))
        body = bytearray(payload)
        requests = [comm.Ibcast([header, MPI.BYTE], root=self.root),
                    comm.Ibcast([body, MPI.BYTE], root=self.root)]
        for request in requests:
            _wait(request, deadline, keep=(header, body))

    def receive(self, deadline: float) -> bytes:
        """On the other ranks: the root's payload, once it has been sent."""
        comm, MPI = world(), _mpi()
        header = bytearray(8)
        _wait(comm.Ibcast([header, MPI.BYTE], root=self.root), deadline, keep=header)
        body = bytearray(int.from_bytes(header, "little"))
        _wait(comm.Ibcast([body, MPI.BYTE], root=self.root), deadline, keep=body)
        return bytes(body)


def finalize_together(timeout: float) -> bool:
    """Wait until every rank got here (at most ``timeout`` s), then ``MPI_Finalize``.

    ``MPI_Finalize`` is collective and blocks until every rank calls it; the
    barrier before it gives that wait a deadline.  Returns False, without
    finalizing, if some rank did not arrive in time.
    """
    if not is_active():
        return True
    try:
        _wait(world().Ibarrier(), time.monotonic() + timeout, keep=None)
    except DeadlinePassed:
        return False
    _flush()
    global _finalized_here
    _finalized_here = True
    _mpi().Finalize()
    return True


def exit_process(status: int) -> NoReturn:
    """Leave the process through C's ``exit()``, after ``MPI_Finalize``.

    MPICH tells its process manager that a rank is done from a C exit handler
    (PMI "finalize"); ``os._exit`` skips it and mpiexec then kills every other
    rank with SIGKILL ("BAD TERMINATION").  Python's own exit is no option on a
    non-client rank either: it would go on running the user's code.  The GIL
    is held throughout (PyDLL), so no other Python thread runs meanwhile.
    """
    logging.shutdown()
    _flush()
    ctypes.PyDLL(None).exit(status)
    os._exit(status)  # pragma: no cover - exit() does not return


def abort(status: int) -> None:
    """End every rank of the job now, with ``status`` (never 0) as its exit status.

    Does nothing if this process does not use MPI (any more): then its own
    exit is all there is to it.
    """
    _flush()
    if is_active():
        # mpiexec stops forwarding output once it starts killing ranks: give
        # what was just printed (the reason for the abort) time to get out.
        time.sleep(OUTPUT_GRACE)
        world().Abort(status or 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _install_abort_on_uncaught_exception() -> None:
    """After an uncaught exception, abort the job instead of finalizing.

    Without this, Python's exit runs ``MPI_Finalize``, which waits for ranks
    that are themselves waiting for this one (for the scheduler's address, for
    a client): the job would hang until its time limit.
    """
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def abort_after_report(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if is_active():
            rank = sys.modules["mpi4py.MPI"].COMM_WORLD.Get_rank()
            print(f"hpcfutures: uncaught {exc_type.__name__} on MPI rank {rank}: aborting the "
                  "job (MPI_Abort) so that no other rank waits for this one", file=sys.stderr)
            abort(130 if issubclass(exc_type, KeyboardInterrupt) else 1)

    sys.excepthook = abort_after_report
