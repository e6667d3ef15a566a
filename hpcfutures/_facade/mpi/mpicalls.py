"""MPI tasks from the client's loop thread: reserve the ranks, run the members, release.

One coroutine per lane (loop thread only, like everything that touches the
Dask client).  A ``submit`` is a queue of one call; a ``map`` a queue of its
items, which its lanes take in groups of consecutive calls (:mod:`.mpilanes`),
each group run on one reservation, call after call, so that the reservation,
the member tasks and the fetch are paid once per group instead of per call::

    futures among the arguments: waited for, replaced by their values
    reserve: the scheduler grants `ranks` free workers at once (_dask/mpigroups.py),
             asked again every RESERVE_WAIT s while they are busy
    futures RUNNING (no longer cancellable; cancelled ones are left out)
    one member task pinned to each reserved worker (_remote/mpitask.py): for
             each call in turn, they build its own communicator among
             themselves, call, and free it
    wait for every member's end (streamed by the scheduler: no round trip);
             fetch the members' outcomes; their end released the workers
    each future: member 0's value, or the first failing member's exception
             (told at once by an event, while the members go on)

MPI tasks do not go through the batching engine: their calls are never
bundled with ordinary ones.

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
from typing import Any

import cloudpickle

from ..._errors import RemoteTraceback
from ..._remote.calls import restore_traceback
from ..._remote.carried import carried
from ..._remote.mpitask import run_members
from ..._remote.shipping import ship
from ..._reports.summary import CALLS_ANNOTATION
from ..core.arguments import futures_in, swap_futures
from ..core.engine import Engine
from ..core.futures import TaskFuture, settle
from ..core.tasks import Task
from .mpilanes import CallQueue
from .mpitask import MPITask

__all__ = ["MPICalls", "member_failure"]

logger = logging.getLogger("hpcfutures")

#: Seconds one request for ranks waits on the scheduler before it is asked again
#: (so that a cancelled call or a broken executor stops waiting soon).
RESERVE_WAIT = 2.0
#: Requests for ranks waiting on the scheduler at once (each holds a connection);
#: the calls after them wait their turn here, in order.
ASKING_AT_ONCE = 16
#: Seconds after a member raised before a warning says that its group has not ended.
STUCK_AFTER = 10.0


class MPICalls:
    """Runs MPI tasks for the bridge (loop thread).

    Args:
        client: The Dask client.
        engine: The engine (the bridge) these calls are part of: runs coroutines on
            the loop (``in_background``), knows whether the executor is ``broken``
            and breaks it (``break_executor``).
    """

    def __init__(self, client: Any, engine: Engine) -> None:
        self._client = client
        self._engine = engine
        self._asking: asyncio.Semaphore | None = None
        #: The groups whose members run now: group -> (task, world ranks, futures sent).
        self._running: dict[str, tuple[MPITask, list[int], list[TaskFuture]]] = {}
        #: The calls not yet given to a group, by future (a group asking for ranks for
        #: them is withdrawn once all are cancelled).
        self._asking_for: dict[TaskFuture, CallQueue] = {}
        self._following = False

    def start(self, futures: list[TaskFuture], task: MPITask,
              calls: list[tuple[tuple, dict]], least: int = 1, lanes: int = 1) -> None:
        """Run ``calls`` (each ``(args, kwargs)``, its future at the same place), in groups
        of at least ``least`` consecutive calls, ``lanes`` groups at once."""
        if not self._following:  # on the loop thread, as the Dask client wants
            from ... import _dask

            _dask.follow_member_losses(self._client, self._member_lost, self._call_failed)
            self._following = True
        self._engine.in_background(self._run(futures, task, calls, least, lanes))

    def asking(self, future: TaskFuture) -> bool:
        """Whether ``future``'s call waits for a group (any thread)."""
        return future in self._asking_for

    def cancelled(self, future: TaskFuture) -> None:
        """The user cancelled ``future``: once no call of its queue is left, withdraw the
        requests for ranks now, so that they do not hold up the calls behind them (loop
        thread)."""
        from ... import _dask

        queue = self._asking_for.pop(future, None)
        if queue is not None and not queue.left():
            for group in queue.asking:
                self._engine.in_background(_quietly(_dask.release_ranks(self._client, group)))

    def _member_lost(self, group: str, world_rank: int | None) -> None:
        """A worker died under a running call: end the MPI job (see the module's doc)."""
        from ...launchers import _mpi

        if group not in self._running:
            return
        task, world_ranks, _ = self._running.pop(group)
        member = world_ranks.index(world_rank) if world_rank in world_ranks else "?"
        name = getattr(task.fn, "__qualname__", repr(task.fn))
        where = f"MPI world rank {world_rank}" if world_rank is not None else "a worker"
        self._engine.break_executor(
            f"{where} died (or lost its connection) while it ran member rank {member} of "
            f"{len(world_ranks)} of MPI task {name!r}; the other members may wait for it "
            "forever inside MPI, so under MPI's rule for a failed process the whole job "
            "ends (MPI_Abort)")
        _mpi.abort(1)

    def _call_failed(self, group: str, index: int, member: int, packed: bytes) -> None:
        """A member told at once that a call raised on it: that call's error, now."""
        entry = self._running.get(group)
        if entry is None or not 0 <= index < len(entry[2]):
            return
        task, world_ranks, futures = entry
        if futures[index].done():
            return
        try:
            error = cloudpickle.loads(packed)
        except Exception:  # the group's outcome brings it, once the members end
            return
        outcomes: list[Any] = [None] * (len(world_ranks) + 1)
        outcomes[member + 1] = error
        settle(futures[index], exception=member_failure(task, world_ranks, outcomes))
        asyncio.get_running_loop().call_later(STUCK_AFTER, self._still_running, group, member)

    def _still_running(self, group: str, member: int) -> None:
        """Warn if the group in which a member raised has not ended since."""
        if group not in self._running:
            return
        task = self._running[group][0]
        logger.warning(
            "member rank %d of MPI task %r raised %g s ago and the members are not done "
            "yet: if the others wait for it inside MPI they never end, their worker ranks "
            "stay reserved, and the launch ends with MPI_Abort after its timeout",
            member, getattr(task.fn, "__qualname__", group), STUCK_AFTER)

    async def _run(self, futures: list[TaskFuture], task: MPITask,
                   calls: list[tuple[tuple, dict]], least: int, lanes: int) -> None:
        ready = await _resolved_calls(futures, calls)
        queue = CallQueue(task, ready, least, max(1, min(lanes, len(ready))))
        self._asking_for.update((future, queue) for future, _ in ready)
        try:
            await asyncio.gather(*(self._lane(queue) for _ in range(queue.lanes)))
        finally:
            for future, _ in ready:
                self._asking_for.pop(future, None)

    async def _lane(self, queue: CallQueue) -> None:
        """Groups of the queue's calls, one after another, until none is left."""
        while queue.left() and self._engine.broken is None:
            if not await self._group(queue):
                return

    async def _group(self, queue: CallQueue) -> bool:
        """Reserve ranks, take the next calls, run them; False: nothing more to do here."""
        from ... import _dask

        task = queue.task
        group = f"mpi-{getattr(task.fn, '__name__', 'mpi_task')}-{uuid.uuid4().hex}"
        keys = [f"{group}-{member}" for member in range(task.ranks)]
        release = True  # unless every member ran (their end frees the ranks)
        taken: list[tuple[TaskFuture, tuple[tuple, dict]]] = []
        try:
            grant = await self._reserve(queue, group, keys)
            taken = queue.take() if grant is not None else []
            for future, _ in taken:
                self._asking_for.pop(future, None)
            if grant is None or not taken:
                return False
            sent = [future for future, _ in taken]
            self._running[group] = (task, list(grant["world_ranks"]), sent)
            outcomes = await self._members(task, grant, keys, [call for _, call in taken])
            release = False
        except Exception as err:
            for future, _ in [*taken, *queue.pending]:
                if not future.done():
                    settle(future, exception=err)
            return False
        finally:
            self._running.pop(group, None)
            if release:
                self._engine.in_background(_quietly(_dask.release_ranks(self._client, group)))
        queue.measured(outcomes[0])
        for index, future in enumerate(sent):
            if future.done():  # told at once (_call_failed), or failed by a broken executor
                continue
            per_call = _call_outcomes(outcomes, index)
            failed = member_failure(task, grant["world_ranks"], per_call)
            if failed is not None:
                settle(future, exception=failed)
            else:
                settle(future, per_call[0])
        return True

    async def _reserve(self, queue: CallQueue, group: str, keys: list[str]) -> dict | None:
        """The scheduler's grant; None once no call is left or the executor broke."""
        from ... import _dask

        if self._asking is None:  # made on the loop thread
            self._asking = asyncio.Semaphore(ASKING_AT_ONCE)
        async with self._asking:
            queue.asking.add(group)
            try:
                while queue.left() and self._engine.broken is None:
                    answer = await _dask.reserve_ranks(self._client, group, queue.task.ranks,
                                                       RESERVE_WAIT, keys,
                                                       queue.task.needs.resources())
                    if "error" in answer:
                        raise RuntimeError(answer["error"])
                    if "workers" in answer:
                        return answer
            finally:
                queue.asking.discard(group)
        return None

    async def _members(self, task: MPITask, grant: dict, keys: list[str],
                       calls: list[tuple[tuple, dict]]) -> list[Any]:
        """Run the members: each one's outcome (a BundleOutcome), or the exception its
        task ended with (its worker lost, or no MPI there)."""
        world_ranks = tuple(grant["world_ranks"])
        group = keys[0].rpartition("-")[0]
        members = []
        # A rank that needs GPUs takes them on its worker as a task's call would; the
        # user's modules the workers lack travel by value.
        fn = ship(Task(task.fn, task.needs) if task.needs.gpus else task.fn, self._client)
        boxed = [carried(args, kwargs) for args, kwargs in calls]  # Dask never reads them
        for index, address in enumerate(grant["workers"]):
            # The end-of-run summary counts the calls on member 0's task (see sending.py).
            with _counted_as(len(calls) if index == 0 else 0):
                members.append(self._client.submit(
                    run_members, fn, boxed, world_ranks, grant["tag"], index, group,
                    key=keys[index], workers=[address], allow_other_workers=False,
                    resources=task.needs.resources(), pure=False))
        errors = await self._first_failure(group, members)
        if any(error is not None for error in errors):
            return errors
        return list(await self._client.gather(members))

    async def _first_failure(self, group: str,
                             members: list[Any]) -> list[BaseException | None]:
        """Each member task's exception (None: fine), as soon as all ended or one failed.

        A member's task fails only when its worker was lost (or has no MPI):
        the calls' own exceptions are in its outcome.  If the others still
        run then, they may wait for it inside MPI forever: that ends the job,
        as a death does.
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
        if waiting:
            _, world_ranks, _ = self._running.get(group, (None, [], []))
            failed = next(index for index, error in enumerate(errors) if error is not None)
            self._member_lost(group, world_ranks[failed] if world_ranks else None)
        return errors


def _counted_as(calls: int) -> contextlib.AbstractContextManager:
    """Annotate the tasks made inside as ``calls`` user calls (none: 1, the default)."""
    if calls == 1:
        return contextlib.nullcontext()
    import dask  # imported by the client already

    return dask.annotate(**{CALLS_ANNOTATION: calls})


async def _resolved_calls(futures: list[TaskFuture], calls: list[tuple[tuple, dict]]
                          ) -> list[tuple[TaskFuture, tuple[tuple, dict]]]:
    """Each call with its arguments resolved; a call whose argument failed gets that error."""
    ready = []
    for future, (args, kwargs) in zip(futures, calls, strict=True):
        try:
            ready.append((future, await _resolved(args, kwargs)))
        except Exception as err:
            settle(future, exception=err)
    return ready


def _call_outcomes(outcomes: list[Any], index: int) -> list[Any]:
    """Call ``index``'s: member 0's value, then each member's exception (None: fine).

    ``outcomes``: each member's BundleOutcome, or the exception its task
    ended with (then that is every call's error).
    """
    per_call: list[Any] = [None]
    for member, outcome in enumerate(outcomes):
        if outcome is None or isinstance(outcome, BaseException):
            per_call.append(outcome)
            continue
        ok, value = outcome.results[index]
        if member == 0 and ok:
            per_call[0] = value
        per_call.append(None if ok else value)
    return per_call


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
