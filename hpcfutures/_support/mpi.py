"""The one place that imports mpi4py, lazily: importing it initialises MPI.

The MPI launcher (:mod:`hpcfutures.launchers._mpi`) gets the module here to
start MPI, broadcast the scheduler's address and finalize; a worker gets here
the communicator of one MPI task's members, and waits here for the other
members without spinning (:mod:`hpcfutures._remote.mpitask`).
Nothing here initialises MPI at import time.
"""

from __future__ import annotations

import faulthandler
import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import LauncherError

__all__ = ["group_communicator", "meet", "mpi_module"]

#: Longest sleep between two looks while a member waits for the others to arrive.
MEET_NAP = 0.001


#: Seconds MPI's start (``MPI_Init``, run by the first import of ``mpi4py.MPI``) may
#: take before the process ends with status 1 instead of hanging: a start that waits on
#: a process manager which will never answer holds the whole allocation.  Generous, for
#: a start over thousands of ranks.
MPI_START_TIMEOUT = 300.0


def mpi_module() -> Any:
    """The ``mpi4py.MPI`` module (importing it initialises MPI, unless the user said not to).

    A start that does not return within :data:`MPI_START_TIMEOUT` ends the process
    with status 1, after printing a traceback that ends in :func:`_start_mpi` (see
    there; ``docs/troubleshooting.rst`` says what to do).
    """
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"]
    try:
        return _start_mpi(MPI_START_TIMEOUT)
    except ImportError as err:
        raise LauncherError(
            "the MPI launcher needs mpi4py, which is not installed: pip install "
            "'hpcfutures[mpi]' (plus an MPI library, e.g. pip install mpich), or choose "
            "another launcher with launcher=... / HPCFUTURES_LAUNCHER"
        ) from err


def _start_mpi(timeout: float) -> Any:
    """Import ``mpi4py.MPI`` (``MPI_Init``), ending the process if that hangs.

    ``MPI_Init`` runs inside the import, holding the GIL, so no Python thread could
    notice a hang: faulthandler's watchdog (a thread of its own that needs no GIL)
    prints every thread's stack, this function's name in it, and exits with status 1.
    One known cause: MPICH 5.0 with Slurm's pmi2 (``srun --mpi=pmi2``) in a process
    that imported many modules before MPI started, where a start-up message of MPICH
    then reaches Slurm malformed and the ranks wait for ever.
    """
    try:
        faulthandler.dump_traceback_later(timeout, exit=True, file=2)  # the real stderr
    except (OSError, ValueError):  # no descriptor 2 (a process started without one)
        pass
    try:
        from mpi4py import MPI
    finally:
        faulthandler.cancel_dump_traceback_later()
    return MPI


def group_communicator(world_ranks: Sequence[int], tag: int) -> Any:
    """A new communicator of just ``world_ranks`` (in that order), made by them alone.

    MPI-3's ``MPI_Comm_create_group`` is collective over the group only, so
    the other ranks of ``COMM_WORLD`` (the scheduler, the client, workers busy
    with other calls) take no part.  ``tag`` keeps apart groups being made at
    the same time.  The caller frees the communicator.
    """
    MPI = mpi_module()
    if not MPI.Is_initialized() or MPI.Is_finalized():
        raise LauncherError("an MPI task reached a worker that does not use MPI: start the "
                            "launch with mpiexec or srun --mpi=pmi2")
    world = MPI.COMM_WORLD
    if world.Get_rank() not in world_ranks:
        raise LauncherError(f"an MPI task for world ranks {list(world_ranks)} reached MPI rank "
                            f"{world.Get_rank()}, which is not one of them")
    whole = world.Get_group()
    group = whole.Incl(list(world_ranks))
    try:
        return world.Create_group(group, tag)
    finally:
        group.Free()
        whole.Free()


def meet(world_ranks: Sequence[int], tag: int) -> None:
    """Return once every rank of ``world_ranks`` has called this, without spinning.

    MPI waits by polling flat out: a member that arrives first at a collective
    would take a whole core from the ranks it waits for (the partner still
    receiving its task, the scheduler sending it) on a node whose ranks share
    cores.  Here the members check in with the first one by point-to-point
    messages on ``COMM_WORLD`` (``tag`` keeps groups apart) and wait with
    short naps; the collectives after it find everyone there.
    """
    world = mpi_module().COMM_WORLD
    me, first = world.Get_rank(), world_ranks[0]
    others = [rank for rank in world_ranks if rank != first]
    if not others or me not in world_ranks:  # group_communicator says what is wrong
        return
    if me == first:
        for rank in others:
            _gently(functools.partial(world.Iprobe, source=rank, tag=tag))
            world.recv(source=rank, tag=tag)
        for rank in others:
            _gently(world.isend(None, dest=rank, tag=tag).Test)
    else:
        _gently(world.isend(None, dest=first, tag=tag).Test)
        _gently(functools.partial(world.Iprobe, source=first, tag=tag))
        world.recv(source=first, tag=tag)


def _gently(ready: Callable[[], Any]) -> None:
    """Wait until ``ready()`` is true, napping longer and longer (up to MEET_NAP s)."""
    nap = 1e-5
    while not ready():
        time.sleep(nap)
        nap = min(MEET_NAP, nap * 2)
