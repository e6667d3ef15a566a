"""The batching engine: how many calls each Dask task carries, and when it goes.

Dask spends about a millisecond per task on the scheduler and the network, so
sending each tiny call as its own task would cap a run near a thousand calls
per second; packing long calls together would instead leave workers idle.
One engine serves ``map`` and ``submit`` alike.  Calls wait in *streams* (one
per running ``map``, one for the plain ``submit`` calls) and the engine cuts
*groups* off the front of each stream:

* a function not measured yet goes in groups of the stream's smallest size
  (``chunksize`` for ``map``, 1 for ``submit``), which measures it;
* a measured function goes in groups of about :data:`TARGET_SECONDS` of work,
  at most :data:`GROWTH` times the stream's previous group (a first
  measurement may flatter), and at most a fair share of what the stream has
  left, so the last calls still spread over every worker; but never split
  below :data:`MIN_SPLIT_SECONDS` of work, where a round trip costs more than
  the balance gains;
* at most :data:`IN_FLIGHT_PER_THREAD` groups per worker thread are out at
  once, all streams together, and a free place goes to the stream with the
  fewest groups out (then to the one served longest ago), so concurrent maps
  and submits share the workers evenly.

The sizes follow the cluster.  T threads each finishing a group of S seconds
ask the scheduler for T/S tasks a second, and the scheduler and the client
manage about :data:`TASKS_PER_SECOND` together, so a group carries at least
T / :data:`TASKS_PER_SECOND` seconds of work (the *pace*): 50 ms up to 50
threads, 1 s at 1,000, 10 s at 10,000, at the end of a map too (smaller groups
there would only queue at the scheduler).  A launch that sustains less (its
threads wait for their next group longer than they should) shows it in the
groups that come back, and the pace follows what it sustains (``pacing.py``).
An unmeasured function is probed by at most :data:`PROBES` one-call groups;
the other places of a stream's first round (its first *budget* groups) each
take an equal share of what it held when they began, as ``chunksize`` would,
so a launch of 10,000 threads starts with as many tasks, not 20,000 single
calls, and a map goes out nearly whole in its first round.  On a launch sized
by the pace a measured function's first round carries that share too (up to
the longest pace the launch may learn); only what is left after it goes in
groups of the pace.

The engine holds no Dask object: the workers measure each call (and how long
their thread waited for it), the owner of a group feeds the seconds back
through :meth:`Batcher.done`, and the unit tests drive it with made-up
durations and a made-up clock.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .durations import Durations
from .pacing import CEILING, Pacing

__all__ = ["Batcher", "Stream", "small_launch"]

#: Seconds of measured work one group should carry.  One figure for both
#: paths: long enough that a task's fixed cost (about a millisecond) stays a
#: few percent, short enough that a submitted call's future completes promptly
#: and a map's first results arrive within a blink (see the module docstring).
TARGET_SECONDS = 0.05
#: Groups in flight per worker thread: one running, one queued behind it.
IN_FLIGHT_PER_THREAD = 2
#: How much bigger than the stream's previous measured group the next may be.
GROWTH = 16
#: Seconds of work below which a group is not split for load balance.
MIN_SPLIT_SECONDS = 0.005
#: Dask tasks a second that the scheduler and the client sustain together, the
#: rate groups are sized for on large launches.  Dask's own figure is 1,000 to
#: 3,000 with the client, scheduler and worker each on a core (about 0.3 ms of
#: scheduler CPU per task); ``benchmarks/scale.py`` measures what this launch
#: sustains beside Dask's own client (the rows "tasks a second").  The low end,
#: so that a busy scheduler still has room for heartbeats and joins.
TASKS_PER_SECOND = 1000
#: One-call groups of a function not measured yet that may be out at once.
#: Enough that the first measurement comes back from many workers, few enough
#: that a large launch's first round is not one task per call.
PROBES = 100
#: Shortest duration believed: keeps sizes finite for calls measured as free.
_FLOOR_SECONDS = 1e-7


def small_launch(threads: int) -> bool:
    """Whether a launch of ``threads`` worker threads is small enough that a group may
    send its finished calls ahead of its end and have its worker tell the scheduler of
    a long call at once (``_remote/express.py``): one whose groups are not sized by
    the pace, where those messages would add to what the scheduler sustains."""
    return not _sized_by_pace(threads)


def _sized_by_pace(threads: int) -> bool:
    """Whether a launch of ``threads`` sizes groups by the pace: a group of the
    target duration would ask the scheduler for more tasks than it sustains."""
    return threads / TASKS_PER_SECOND > TARGET_SECONDS


class Stream:
    """Calls waiting to be grouped: here, arguments of one function (a ``map``).

    Subclasses with calls of several functions override :meth:`head_fn` and
    :meth:`take`; the owner of a stream overrides :meth:`dispatch`.  The
    ``pending`` deque and the bookkeeping below belong to the engine's lock.
    """

    def __init__(self, fn: Callable[..., Any] | None = None, calls: Iterable[Any] = (),
                 min_size: int = 1) -> None:
        self.fn = fn
        self.pending: collections.deque = collections.deque(calls)
        self.min_size = max(1, min_size)
        #: Size of the last group cut with a known duration: the growth base.
        self.next_size = self.min_size
        self.in_flight = 0
        self.last_served = -1
        #: Groups that came back (the first round's tell nothing of the pace: see done).
        self.returned = 0
        #: Calls per group of the first round after its probes (Batcher._first_share).
        self.first_share: int | None = None

    def in_first_round(self, budget: int) -> bool:
        """Whether fewer than ``budget`` groups were cut from this stream so far."""
        return self.returned + self.in_flight < budget

    def head_fn(self) -> Callable[..., Any] | None:
        """The function of the first waiting call; None when nothing waits."""
        return self.fn if self.pending else None

    def take(self, n: int) -> list:
        """Up to ``n`` calls off the front, all of the head's function."""
        pending = self.pending
        return [pending.popleft() for _ in range(min(n, len(pending)))]

    def dispatch(self, calls: list) -> None:
        """Send a group the engine cut (called outside the engine's lock)."""
        raise NotImplementedError

    def drained(self, calls: list, error: BaseException) -> None:
        """The engine drained: ``calls`` (all this stream held) will never be sent."""
        raise NotImplementedError


class Batcher:
    """Cuts groups off every open stream within one in-flight budget (thread-safe)."""

    def __init__(self, threads: Callable[[], int], durations: Durations | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._threads = threads
        #: The pace the launch sustains, learnt from the groups that come back.
        self.pacing = Pacing(clock)
        #: Seconds per call by function, shared by every stream for the executor's life.
        self.durations = durations if durations is not None else Durations()
        self._streams: list[Stream] = []
        self._in_flight = 0
        self._served = itertools.count()
        self._lock = threading.Lock()
        #: Set by :meth:`drain`: no group is cut any more.
        self._drained = False

    # --------------------------------------------------------------- streams
    def open(self, stream: Stream) -> bool:
        """Take ``stream`` in; False (and nothing taken) once the engine drained."""
        with self._lock:
            if self._drained:
                return False
            self._streams.append(stream)
            return True

    def close(self, stream: Stream) -> None:
        """Drop what ``stream`` still holds; its groups in flight still count until done."""
        with self._lock:
            stream.pending.clear()
            if stream in self._streams:
                self._streams.remove(stream)

    def add(self, stream: Stream, call: Any) -> None:
        with self._lock:
            stream.pending.append(call)

    def extend(self, stream: Stream, calls: list) -> bool:
        """Add ``calls`` to ``stream``; False (nothing added) once the engine drained."""
        with self._lock:
            if self._drained:
                return False
            stream.pending.extend(calls)
            return True

    def take_out(self, stream: Stream, claim: Callable[[], Any]) -> Any:
        """Count the call ``claim`` takes off ``stream`` as a group in flight.

        For a call that must go at once, alone (its future became an argument);
        ``claim`` runs under the engine's lock and returns None if that call no
        longer waits.
        """
        with self._lock:
            call = claim()
            if call is not None:
                self._count_out(stream)
            return call

    def count_out(self, stream: Stream) -> None:
        """Count one more group of ``stream`` in flight, cut outside the engine (calls
        a worker gave back, sent again as a group of their own)."""
        with self._lock:
            self._count_out(stream)

    # ----------------------------------------------------------------- groups
    @property
    def in_flight(self) -> int:
        return self._in_flight

    def budget(self) -> int:
        """Groups that may be out at once: enough to keep every worker thread busy."""
        return IN_FLIGHT_PER_THREAD * max(1, self._threads())

    def pace(self) -> float:
        """Seconds of work a group carries at least, so that every thread finishing
        its groups asks no more tasks of the scheduler than the launch sustains
        (:data:`TASKS_PER_SECOND` until it shows otherwise: ``pacing.py``)."""
        return self.pacing.pace(max(1, self._threads()) / TASKS_PER_SECOND)

    def drain(self) -> list[tuple[Stream, list]]:
        """Cut nothing from now on; hand back every stream with the calls it held
        (for the caller to fail them, outside the lock).  Groups in flight finish."""
        with self._lock:
            self._drained = True
            held = [(stream, list(stream.pending)) for stream in self._streams]
            for stream in self._streams:
                stream.pending.clear()
        return held

    def plan(self) -> list[tuple[Stream, list]]:
        """Cut the groups there is room for now; the caller dispatches them in order."""
        groups: list[tuple[Stream, list]] = []
        with self._lock:
            if self._drained:
                return groups
            budget, pace = self.budget(), self.pace()
            while self._in_flight < budget:
                stream = self._neediest()
                if stream is None:
                    break
                calls = self._cut(stream, budget, pace)
                if calls:  # else every call it held was cancelled meanwhile
                    groups.append((stream, calls))
                    self._count_out(stream)
        return groups

    def done(self, stream: Stream,
             measured: Iterable[tuple[Callable[..., Any], float]] = (),
             busy: float | None = None, idle: float | None = None) -> None:
        """A group of ``stream`` came back (or was given up); learn its durations.

        ``measured`` holds (function, seconds per call) pairs from the workers;
        ``busy``: seconds the group computed; ``idle``: seconds its thread
        waited for it while it was on its way (see ``pacing.py``).
        """
        for fn, seconds in measured:
            self.durations.record(fn, seconds)
        with self._lock:
            stream.in_flight -= 1
            self._in_flight -= 1
            stream.returned += 1
            if busy is None or idle is None or not stream.pending:
                return
            # What the pace is learnt from: a large launch (below, the idle time
            # is a round trip), a stream with calls still waiting (at a map's end
            # idle threads take over queued groups), past its first round (sent
            # all at once, its groups waited for the scheduler to hand out the
            # whole burst, and carried fair shares, not the pace).
            threads = max(1, self._threads())
            if _sized_by_pace(threads) and stream.returned > IN_FLIGHT_PER_THREAD * threads:
                self.pacing.observe(busy, idle, threads)

    def _count_out(self, stream: Stream) -> None:
        stream.in_flight += 1
        stream.last_served = next(self._served)
        self._in_flight += 1

    def _neediest(self) -> Stream | None:
        """The waiting stream with the fewest groups out, then the longest unserved."""
        waiting = [s for s in self._streams if s.head_fn() is not None]
        if not waiting:
            return None
        return min(waiting, key=lambda s: (s.in_flight, s.last_served))

    def _first_share(self, stream: Stream, budget: int) -> int:
        """Calls per group of the stream's first round (after its probes).

        Fixed when first asked: what the stream holds then, over the places
        its first round may still take.  A share of what is left at each cut
        shrinks place by place (a first round would carry only ~60 % of a
        map), and the rest would go in groups of the pace: three times the
        tasks, on a launch whose scheduler is its bottleneck, so a slower map
        (``benchmarks/scale-history.rst`` compares the two).
        Calls added later, as submits are, still get at least a share of what is
        left (see :meth:`_cut`)."""
        if not stream.in_first_round(budget):
            return 1
        if stream.first_share is None:
            free = max(1, budget - stream.in_flight)
            stream.first_share = max(1, len(stream.pending) // free)
        return stream.first_share

    def _cut(self, stream: Stream, budget: int, pace: float) -> list:
        """The next group of ``stream``: the sizing rule of the module docstring."""
        fair = max(1, len(stream.pending) // budget)
        threads = budget // IN_FLIGHT_PER_THREAD  # as budget() read them
        members: list = []
        planned = 0.0
        measured = False
        while (fn := stream.head_fn()) is not None:
            estimate = self.durations.get(fn)
            if estimate is None:  # unknown: a smallest group, which measures it
                if not members:
                    if stream.in_flight < PROBES:
                        members = stream.take(stream.min_size)
                    else:
                        members = stream.take(max(stream.min_size, fair,
                                                  self._first_share(stream, budget)))
                break
            estimate = max(estimate, _FLOOR_SECONDS)
            measured = True
            # The pace is a floor (rounded up: calls of 0.6 s at a pace of 1 s go
            # two by two), the target a goal (rounded down).
            paced = math.ceil((pace - planned) / estimate - 1e-9)
            if _sized_by_pace(threads) and not members and stream.in_first_round(budget):
                # A large launch's first round carries the stream's share too, up
                # to the longest pace the launch may learn; the rest goes at the
                # pace (larger groups at a map's end would only make its tail).
                longest = int(CEILING * threads / TASKS_PER_SECOND / estimate)
                paced = max(paced, min(max(fair, self._first_share(stream, budget)),
                                       longest))
            cap = min(stream.next_size * GROWTH,
                      max(fair, int(MIN_SPLIT_SECONDS / estimate), paced))
            room = min(max(int((TARGET_SECONDS - planned) / estimate + 1e-9), paced),
                       cap - len(members))
            room = max(room, stream.min_size - len(members))
            if room <= 0:
                break
            taken = stream.take(room)
            members += taken
            planned += len(taken) * estimate
            if len(taken) == room:
                break
        if measured:
            stream.next_size = max(len(members), stream.min_size)
        return members
