"""MPI tasks from the client's loop thread: reserve the ranks, run the members, release.

One coroutine per call (loop thread only, like everything that touches the
Dask client)::

    futures among the arguments: waited for, replaced by their values
    reserve: the scheduler grants `ranks` free workers at once (_dask/mpigroups.py),
             asked again every RESERVE_WAIT s while they are busy
    future RUNNING (no longer cancellable)
    one member task pinned to each reserved worker (_remote/mpitask.py);
             they build the call's communicator among themselves
    wait for every member's end (streamed by the scheduler: no round trip);
             fetch member 0's value only; release the workers
    future: member 0's value, or the first failing member's exception

MPI tasks do not go through the batching engine: a call is never bundled
with others, and each member is its own Dask task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import uuid
from collections.abc import Callable
from typing import Any

from .._errors import RemoteTraceback
from .._remote.calls import restore_traceback
from .._remote.mpitask import run_member
from .arguments import futures_in, swap_futures
from .futures import TaskFuture, settle
from .mpitask import MPITask

__all__ = ["MPICalls", "member_failure"]

#: Seconds one request for ranks waits on the scheduler before it is asked again
#: (so that a cancelled call or a broken executor stops waiting soon).
RESERVE_WAIT = 2.0
#: Requests for ranks waiting on the scheduler at once (each holds a connection);
#: the calls after them wait their turn here, in order.
ASKING_AT_ONCE = 16


class MPICalls:
    """Runs MPI tasks for the bridge (loop thread).

    Args:
        client: The Dask client.
        in_background: Runs a coroutine on the loop, keeping it alive.
        broken: The executor's breaking error, once it is broken.
    """

    def __init__(self, client: Any, in_background: Callable[[Any], None],
                 broken: Callable[[], BaseException | None]) -> None:
        self._client = client
        self._in_background = in_background
        self._broken = broken
        self._asking: asyncio.Semaphore | None = None

    def start(self, future: TaskFuture, task: MPITask, args: tuple, kwargs: dict) -> None:
        self._in_background(self._run(future, task, args, kwargs))

    async def _run(self, future: TaskFuture, task: MPITask, args: tuple, kwargs: dict) -> None:
        from .. import _dask

        name = getattr(task.fn, "__name__", "mpi_task")
        call = f"mpi-{name}-{uuid.uuid4().hex}"
        keys = [f"{call}-{member}" for member in range(task.ranks)]
        release = False  # once asked for: unless every member ran (its end frees them)
        try:
            args, kwargs = await _resolved(args, kwargs)
            release = True
            grant = await self._reserve(future, call, task.ranks, keys)
            if grant is None or not _start(future):
                return
            outcomes = await self._members(task, grant, keys, args, kwargs)
            release = False
        except Exception as err:
            settle(future, exception=err)
            return
        finally:
            if release:
                self._in_background(_quietly(_dask.release_ranks(self._client, call)))
        failed = member_failure(task, grant["world_ranks"], outcomes)
        if failed is not None:
            settle(future, exception=failed)
        else:
            settle(future, outcomes[0])

    async def _reserve(self, future: TaskFuture, call: str, ranks: int,
                       keys: list[str]) -> dict | None:
        """The scheduler's grant; None once the call was cancelled or the executor broke."""
        from .. import _dask

        if self._asking is None:  # made on the loop thread
            self._asking = asyncio.Semaphore(ASKING_AT_ONCE)
        async with self._asking:
            while not future.done() and self._broken() is None:
                answer = await _dask.reserve_ranks(self._client, call, ranks, RESERVE_WAIT,
                                                   keys)
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                if "workers" in answer:
                    return answer
        return None

    async def _members(self, task: MPITask, grant: dict, keys: list[str], args: tuple,
                       kwargs: dict) -> list[Any]:
        """Run the members; member 0's value, then the others' exceptions (None: fine)."""
        world_ranks = tuple(grant["world_ranks"])
        members = [
            self._client.submit(run_member, task.fn, args, kwargs, world_ranks, grant["tag"],
                                index, key=keys[index], workers=[address],
                                allow_other_workers=False, pure=False)
            for index, address in enumerate(grant["workers"])]
        errors = await asyncio.gather(*(member.exception() for member in members))
        first = None if errors[0] is not None else await members[0].result()
        return [first, *errors]


def _start(future: TaskFuture) -> bool:
    """Mark the call RUNNING; False if it was cancelled (or settled) meanwhile."""
    try:
        return future.set_running_or_notify_cancel()
    except RuntimeError:
        return False


async def _resolved(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments with each future among them replaced by its value (its error raises)."""
    found = futures_in(args, kwargs)
    if not found:
        return args, kwargs
    await asyncio.gather(*(asyncio.wrap_future(f) for f in found))

    def value(future: cf.Future) -> Any:
        return future.result()

    return swap_futures(args, value), swap_futures(kwargs, value)


async def _quietly(awaitable: Any) -> None:
    """Release in the background; a scheduler that is gone has nothing to release."""
    try:
        await awaitable
    except Exception:
        pass


def member_failure(task: MPITask, world_ranks: list[int],
                   outcomes: list[Any]) -> BaseException | None:
    """The first failing member's exception (its own type), naming that member; else None.

    ``outcomes``: member 0's value, then each member's exception or None.
    """
    for member, error in enumerate(outcomes[1:]):
        if error is None:
            continue
        error = restore_traceback(error)
        name = getattr(task.fn, "__qualname__", repr(task.fn))
        where = (f"member rank {member} of {len(outcomes) - 1} of MPI task {name!r} "
                 f"(MPI world rank {world_ranks[member]})")
        cause = error.__cause__
        text = cause.text if isinstance(cause, RemoteTraceback) else ""
        error.__cause__ = RemoteTraceback(f"\nRaised on {where}{text}")
        if hasattr(error, "add_note"):  # Python 3.11+: shown under the error itself
            error.add_note(f"raised on {where}")
        return error
    return None
