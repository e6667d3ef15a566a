"""Groups of worker ranks reserved all together for one MPI task.

The scheduler keeps which worker belongs to which call.  A call asks for
``ranks`` workers and gets them all at once, or waits (without blocking the
event loop) until that many are free: a call never holds part of a group
while it waits for the rest, so two waiting calls can never block each
other.  Requests are granted in the order they came (a large call is not
starved by a stream of small ones).  A worker is free when no call holds it,
it has joined and is not leaving, it is an MPI rank (its name is ``rank-<world rank>``) and the
idle release (release.py) is not retiring it::

    client                         scheduler (RankGroups)
    reserve(call, ranks, wait) --> queued; granted when `ranks` are free:
                               <-- {workers, world_ranks, tag}
                                   ... or {"waiting": True} after `wait` s
                                   (ask again), or {"error": why} when the
                                   launch can never have that many
    member tasks, one pinned to each  the last member's end (seen by the
    reserved worker, keys given in     Coordinator's transition hook) frees
    the request                        them, and grants the next call at once
    release(call)              --> frees them too (a call cancelled, or
                                   failed before its members ran); a call
                                   still queued is withdrawn
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._common import scheduler_rpc

if TYPE_CHECKING:
    from distributed import Client, Scheduler

__all__ = ["RankGroups", "follow_member_losses", "release_ranks", "reserve_ranks",
           "tell_call_failed", "world_rank"]

RESERVE_OP = "hpcfutures_mpi_reserve"
RELEASE_OP = "hpcfutures_mpi_release"
#: Event topic on which the scheduler says that a worker died under a running MPI task.
MEMBER_LOST_TOPIC = "hpcfutures-mpi-member-lost"
#: Event topic on which a member says at once that a call raised on it (see _remote/mpitask.py).
CALL_FAILED_TOPIC = "hpcfutures-mpi-call-failed"
#: Task states in which a member task has ended (its worker is done with it).
MEMBER_ENDS = frozenset({"memory", "erred", "forgotten"})
#: Worker states in which a worker may be granted: one that joined a moment ago is
#: still "init" (Dask sends it the member once it runs), a paused one resumes.
USABLE = frozenset({"init", "running", "paused"})
#: Tags of MPI_Comm_create_group stay below this (MPI guarantees tags up to 32767).
TAG_LIMIT = 32768


def world_rank(name: object) -> int | None:
    """The MPI world rank of a worker named ``rank-<n>`` by the launch, else None."""
    text = str(name)
    if not text.startswith("rank-") or not text[5:].isdigit():
        return None
    return int(text[5:])


class RankGroups:
    """The scheduler's book of reserved workers (a scheduler-side helper of the Coordinator).

    It is told of every join (:meth:`worker_joined`) and leave
    (:meth:`worker_gone`) and keeps its own list of the MPI ranks present, so
    that an event costs O(1) while no call waits or while the first in line
    cannot fit even if every rank nobody holds were free; only then does it
    rank the free workers (O(W log W): milliseconds at 10,000 workers), once
    per event however many calls it grants.  Scanning all workers for every
    waiting call on every join would cost about a minute of the scheduler's
    loop over a 10,000-rank ramp with one call waiting.
    """

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        #: Worker address -> the call holding it (always one of ``_ranks``).
        self.held: dict[str, str] = {}
        #: The MPI ranks present: worker address -> world rank (not leaving).
        self._ranks: dict[str, int] = {}
        self._grants: dict[str, dict[str, Any]] = {}
        #: Member task key -> its call, for the members still running.
        self._members: dict[str, str] = {}
        #: Call -> its members still running.
        self._running: dict[str, set[str]] = {}
        #: Calls waiting for workers, first come first served: call -> (ranks, what each
        #: rank needs as Dask resources, answer).
        self._waiting: collections.OrderedDict[
            str, tuple[int, dict[str, float], asyncio.Future[Any]]] = collections.OrderedDict()
        self._tags = itertools.count()
        #: Workers that must not be granted (being retired as idle): set by release.py.
        self.unavailable: Callable[[], set[str]] = set
        #: How many workers the launch can still have (None: not known).
        self.capacity: Callable[[], int | None] = lambda: None

    def install(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        # None: a unit test's stand-in scheduler (test_serve's has no workers).
        for address in getattr(scheduler, "workers", {}):
            self._note_rank(address)
        scheduler.handlers[RESERVE_OP] = self._reserve
        scheduler.handlers[RELEASE_OP] = self._release
        self._keep_held_workers_busy(scheduler)

    def _keep_held_workers_busy(self, scheduler: Scheduler) -> None:
        """Dask files a worker as idle again whenever it looks at it (a heartbeat, a
        task of its ending): a held worker must stay out of the idle sets until its
        call's members have run, or an ordinary task lands there first and a member
        waits behind it (the call starts only once that task has ended)."""
        recheck = getattr(scheduler, "check_idle_saturated", None)
        # None: a unit test's stand-in scheduler (tests/test_dask_seams.py pins Dask's own).
        if recheck is None:
            return

        def check_idle_saturated(ws: Any, *args: Any, **kwargs: Any) -> None:
            recheck(ws, *args, **kwargs)
            if ws.address in self.held:
                self._keep_ordinary_tasks_off(ws.address)

        scheduler.check_idle_saturated = check_idle_saturated  # type: ignore[method-assign]

    def holds(self, address: str) -> bool:
        """Whether a call holds the worker at ``address`` (it is not idle then)."""
        return address in self.held

    # ------------------------------------------------------------ handlers
    async def _reserve(self, call: str, ranks: int, wait: float,
                       keys: list[str] | None = None,
                       needs: dict[str, float] | None = None) -> dict[str, Any]:
        if keys and call not in self._running:
            self._running[call] = set(keys)
            self._members.update(dict.fromkeys(keys, call))
        if call in self._grants:
            return self._grants[call]
        impossible = self._impossible(ranks)
        if impossible:
            self._waiting.pop(call, None)
            return {"error": impossible}
        if call not in self._waiting:
            self._waiting[call] = (ranks, dict(needs or {}),
                                   asyncio.get_running_loop().create_future())
        self.changed()
        answer = self._waiting[call][2] if call in self._waiting else None
        if answer is None:
            return self._grants[call]
        with contextlib.suppress(asyncio.TimeoutError):
            return dict(await asyncio.wait_for(asyncio.shield(answer), wait))
        return {"waiting": True}

    def worker_joined(self, address: str) -> None:
        """A worker joined: an MPI rank may let the first call in line go."""
        self._note_rank(address)
        self.changed()

    def _note_rank(self, address: str) -> None:
        assert self.scheduler is not None
        ws = self.scheduler.workers.get(address)
        rank = world_rank(ws.name) if ws is not None else None
        if rank is not None:
            self._ranks[address] = rank

    def worker_gone(self, address: str) -> None:
        """A worker left (after :meth:`worker_left` told of a running call's loss):
        it can be granted no more, and holds nothing any more."""
        self._ranks.pop(address, None)
        self.held.pop(address, None)
        self.changed()

    def worker_left(self, address: str) -> None:
        """A worker left: if it held a running MPI task, tell the client (its other
        members may wait for it in a collective forever: MPI's rule ends the job)."""
        call = self.held.get(address)
        if call is None or not self._running.get(call) or self.scheduler is None:
            return
        grant = self._grants[call]
        rank = grant["world_ranks"][list(grant["workers"]).index(address)]
        self.scheduler.log_event(MEMBER_LOST_TOPIC, {"call": call, "worker": address,
                                                     "world_rank": rank})

    def member_ended(self, key: Any) -> None:
        """A member task ended: once all of its call's have, its workers are free."""
        call = self._members.pop(key, None) if isinstance(key, str) else None
        if call is None:
            return
        running = self._running.get(call, set())
        running.discard(key)
        if not running:
            self._release(call)

    def _release(self, call: str) -> str:
        for key in self._running.pop(call, ()):
            self._members.pop(key, None)
        self._waiting.pop(call, None)
        grant = self._grants.pop(call, None)
        for address in grant["workers"] if grant else ():
            if self.held.get(address) == call:
                del self.held[address]
                self._open_to_ordinary_tasks(address)
        self.changed()
        return "ok"

    # ------------------------------------------------------------ granting
    def _impossible(self, ranks: int) -> str:
        capacity = self.capacity()
        if capacity is not None and ranks > capacity:
            return (f"an MPI task asks for {ranks} ranks, but the launch can have only "
                    f"{capacity} worker(s) any more (the others were released as idle)")
        return ""

    def _free(self) -> list[str]:
        """Free MPI worker ranks, the least busy first (O(W log W): see changed)."""
        assert self.scheduler is not None
        workers = self.scheduler.workers
        unavailable = self.unavailable()
        free = []
        for address, rank in self._ranks.items():
            ws = workers.get(address)
            if (ws is not None and address not in self.held and address not in unavailable
                    and ws.status.name in USABLE):
                free.append((len(ws.processing), rank, address))
        return [address for *_, address in sorted(free)]

    def _having(self, free: list[str], needs: dict[str, float]) -> list[str]:
        """The workers of ``free`` that have what each rank ``needs`` (all without needs)."""
        if not needs:
            return free
        assert self.scheduler is not None
        workers = self.scheduler.workers
        return [address for address in free if address in workers and all(
            workers[address].resources.get(name, 0) >= amount
            for name, amount in needs.items())]

    def _keep_ordinary_tasks_off(self, address: str) -> None:
        """Until its member task arrives, Dask would see a reserved worker as idle and
        give it the next ordinary task, which the member would then wait behind.
        Out of the scheduler's idle sets while held, it gets ordinary tasks only when
        no worker is idle."""
        assert self.scheduler is not None
        ws = self.scheduler.workers[address]
        self.scheduler.idle.pop(address, None)
        self.scheduler.idle_task_count.discard(ws)

    def _open_to_ordinary_tasks(self, address: str) -> None:
        assert self.scheduler is not None
        ws = self.scheduler.workers.get(address)
        if ws is not None and ws.status.name == "running":
            self.scheduler.check_idle_saturated(ws)

    def changed(self) -> None:
        """Grant what waits, in order, while the first in line fits (workers came or left).

        Called on every join, leave, reservation and release, so it costs O(1)
        unless a grant may happen: nothing when no call waits, nothing while the
        ranks nobody holds (an upper bound on the free ones) are too few for
        the first in line.  Otherwise the free ranks are listed once, and every
        call granted now takes its workers from that one list.
        """
        if self.scheduler is None or not self._waiting:
            return
        free: list[str] | None = None
        while self._waiting:
            call, (ranks, needs, answer) = next(iter(self._waiting.items()))
            if free is None:
                if len(self._ranks) - len(self.held) < ranks:
                    return
                free = self._free()
            fitting = self._having(free, needs)
            if len(fitting) < ranks:
                return
            del self._waiting[call]
            workers = fitting[:ranks]
            free = [address for address in free if address not in workers]
            for address in workers:
                self.held[address] = call
                self._keep_ordinary_tasks_off(address)
            grant = {"workers": workers,
                     "world_ranks": [self._ranks[a] for a in workers],
                     "tag": next(self._tags) % TAG_LIMIT}
            self._grants[call] = grant
            if not answer.done():
                answer.set_result(grant)


# ------------------------------------------------------------------ client
async def reserve_ranks(client: Client, call: str, ranks: int, wait: float,
                        keys: list[str] | None = None,
                        needs: dict[str, float] | None = None) -> dict[str, Any]:
    """Ask the scheduler for ``ranks`` workers for ``call``, each with the resources
    ``needs``, whose member tasks will have ``keys`` (their end frees the workers);
    see :class:`RankGroups`."""
    answer: dict[str, Any] = await asyncio.wait_for(
        getattr(scheduler_rpc(client), RESERVE_OP)(call=call, ranks=ranks, wait=wait,
                                                   keys=keys, needs=needs),
        wait + 10)
    return answer


def follow_member_losses(client: Client, lost: Callable[[str, int | None], None],
                         failed: Callable[[str, int, int, bytes], None]) -> None:
    """Call ``lost(call, world_rank)`` when a worker dies under a running MPI task, and
    ``failed(group, index, member, pickled error)`` when a call raised on a member."""
    def heard(event: tuple[float, dict[str, Any]]) -> None:
        lost(event[1]["call"], event[1]["world_rank"])

    def told(event: tuple[float, dict[str, Any]]) -> None:
        failed(event[1]["group"], event[1]["index"], event[1]["member"], event[1]["error"])

    client.subscribe_topic(MEMBER_LOST_TOPIC, heard)
    client.subscribe_topic(CALL_FAILED_TOPIC, told)


def tell_call_failed(group: str, index: int, member: int, error: bytes) -> None:
    """On a member's worker: tell the client that call ``index`` of ``group`` raised here."""
    from distributed import get_worker

    get_worker().log_event(CALL_FAILED_TOPIC, {"group": group, "index": index,
                                               "member": member, "error": error})


async def release_ranks(client: Client, call: str) -> None:
    """Give ``call``'s workers back (or withdraw its request)."""
    await asyncio.wait_for(getattr(scheduler_rpc(client), RELEASE_OP)(call=call), 10)
