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

A worker that dies while it runs a member leaves the other members waiting
for it, inside MPI, where nothing can interrupt them.  MPI's own rule for a
process that fails (the whole job ends) is then the only way out: the
scheduler says so (an event), the client breaks the executor, says why, and
aborts the MPI job, so that the launcher returns at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from .._errors import RemoteTraceback
from .._remote.calls import restore_traceback
from .._remote.mpitask import raised_by_the_call, run_member
from .._reports.summary import CALLS_ANNOTATION
from .arguments import futures_in, swap_futures
from .futures import TaskFuture, settle
from .mpitask import MPITask

__all__ = ["MPICalls", "member_failure"]

logger = logging.getLogger("hpcfutures")

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
        break_executor: Breaks the executor, with the reason.
    """

    def __init__(self, client: Any, in_background: Callable[[Any], None],
                 broken: Callable[[], BaseException | None],
                 break_executor: Callable[[str], None]) -> None:
        self._client = client
        self._in_background = in_background
        self._broken = broken
        self._break_executor = break_executor
        self._asking: asyncio.Semaphore | None = None
        #: The calls whose members run now: call -> (task, world ranks).
        self._running: dict[str, tuple[MPITask, list[int]]] = {}
        #: The calls still asking for ranks, by future (withdrawn at once when cancelled).
        self._asking_for: dict[TaskFuture, str] = {}
        self._following = False

    def start(self, future: TaskFuture, task: MPITask, args: tuple, kwargs: dict) -> None:
        if not self._following:  # on the loop thread, as the Dask client wants
            from .. import _dask

            _dask.follow_member_losses(self._client, self._member_lost)
            self._following = True
        self._in_background(self._run(future, task, args, kwargs))

    def asking(self, future: TaskFuture) -> bool:
        """Whether ``future``'s call is asking the scheduler for ranks (any thread)."""
        return future in self._asking_for

    def cancelled(self, future: TaskFuture) -> None:
        """The user cancelled ``future``: withdraw its request now, so that it does not
        hold up the calls behind it (loop thread)."""
        from .. import _dask

        call = self._asking_for.pop(future, None)
        if call is not None:
            self._in_background(_quietly(_dask.release_ranks(self._client, call)))

    def _member_lost(self, call: str, world_rank: int | None) -> None:
        """A worker died under a running call: end the MPI job (see the module's doc)."""
        from ..launchers import _mpi

        if call not in self._running:
            return
        task, world_ranks = self._running.pop(call)
        member = world_ranks.index(world_rank) if world_rank in world_ranks else "?"
        name = getattr(task.fn, "__qualname__", repr(task.fn))
        where = f"MPI world rank {world_rank}" if world_rank is not None else "a worker"
        self._break_executor(
            f"{where} died (or lost its connection) while it ran member rank {member} of "
            f"{len(world_ranks)} of MPI task {name!r}; the other members may wait for it "
            "forever inside MPI, so under MPI's rule for a failed process the whole job "
            "ends (MPI_Abort)")
        _mpi.abort(1)

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
            self._running[call] = (task, list(grant["world_ranks"]))
            outcomes = await self._members(task, grant, keys, args, kwargs)
            release = False
        except Exception as err:
            settle(future, exception=err)
            return
        finally:
            self._running.pop(call, None)
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
            self._asking_for[future] = call
            try:
                while not future.done() and self._broken() is None:
                    answer = await _dask.reserve_ranks(self._client, call, ranks,
                                                       RESERVE_WAIT, keys)
                    if "error" in answer:
                        raise RuntimeError(answer["error"])
                    if "workers" in answer:
                        return answer
            finally:
                self._asking_for.pop(future, None)
        return None

    async def _members(self, task: MPITask, grant: dict, keys: list[str], args: tuple,
                       kwargs: dict) -> list[Any]:
        """Run the members; member 0's value, then the others' exceptions (None: fine)."""
        world_ranks = tuple(grant["world_ranks"])
        members = []
        for index, address in enumerate(grant["workers"]):
            # The end-of-run summary counts one call, member 0's (see sending.py).
            with _counted_as(1 if index == 0 else 0):
                members.append(self._client.submit(
                    run_member, task.fn, args, kwargs, world_ranks, grant["tag"], index,
                    key=keys[index], workers=[address], allow_other_workers=False,
                    pure=False))
        errors = await self._first_failure(members)
        if any(error is not None for error in errors):
            return [None, *errors]
        return [await members[0].result(), *errors]

    async def _first_failure(self, members: list[Any]) -> list[BaseException | None]:
        """Each member's exception (None: fine), as soon as all ended or one failed.

        The others may wait for a failed member inside MPI forever: its error is
        the call's at once, and they keep their workers reserved until they end.
        A failure that is no exception of the call's function (the member's
        worker was lost) while others still run ends the job, as a death does.
        """
        waiting = {asyncio.ensure_future(member.exception()): index
                   for index, member in enumerate(members)}
        errors: list[BaseException | None] = [None] * len(members)
        try:
            while waiting and not any(errors):
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for ended in done:
                    errors[waiting.pop(ended)] = ended.result()
        finally:
            for left in waiting:
                left.cancel()
        lost = [index for index, error in enumerate(errors)
                if error is not None and not raised_by_the_call(error)]
        call = str(members[0].key).rpartition("-")[0]
        task, world_ranks = self._running.get(call, (None, []))
        if lost and waiting:
            self._member_lost(call, world_ranks[lost[0]] if world_ranks else None)
        elif waiting:
            failed = next(index for index, error in enumerate(errors) if error is not None)
            logger.warning(
                "member rank %d of MPI task %r raised while %d other member(s) still run: "
                "if they wait for it inside MPI they never end, their worker ranks stay "
                "reserved, and the launch ends with MPI_Abort after its timeout",
                failed, getattr(getattr(task, "fn", None), "__qualname__", call),
                len(waiting))
        return errors


def _counted_as(calls: int) -> contextlib.AbstractContextManager:
    """Annotate the tasks made inside as ``calls`` user calls (none: 1, the default)."""
    if calls == 1:
        return contextlib.nullcontext()
    import dask  # imported by the client already

    return dask.annotate(**{CALLS_ANNOTATION: calls})


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
