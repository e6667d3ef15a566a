"""Bundling of ``submit`` calls: many tiny tasks, few Dask tasks.

Dask spends about a millisecond per task on the scheduler, so a loop of a
few thousand ``submit(f, x)`` calls of tiny functions would run at Dask's pace,
not the workers'.  The :class:`Bundler` keeps plain calls (no futures among
their arguments) on the client, like ``ProcessPoolExecutor``'s call queue,
and sends them when there is room, at most two bundles per worker thread:

* a function seen for the first time goes alone, which measures it;
* later calls are packed so that one bundle carries about
  :data:`TARGET_SECONDS` of measured work, but never more than a fair share of
  what is waiting, so long tasks still spread over every worker.

Each call keeps its own future, result and exception.  A call still waiting
here can be cancelled for real; once sent its future is RUNNING and, as with
``ProcessPoolExecutor``, no longer cancellable.  A call whose future becomes an
argument of a later ``submit`` is sent at once, and its value is picked out of
its bundle on the workers.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._remote.calls import BundleOutcome, restore_traceback, run_bundle

if TYPE_CHECKING:
    from .bridge import TaskBridge, TaskFuture

__all__ = ["TARGET_SECONDS", "Bundler"]

#: Seconds of measured work one bundle should carry.
TARGET_SECONDS = 0.02
#: Bundles in flight per worker thread: one running, one queued behind it.
IN_FLIGHT_PER_THREAD = 2

class Bundler:
    """Holds plain calls on the client and sends them in bundles (loop thread only,
    except :meth:`hold`)."""

    def __init__(self, bridge: TaskBridge) -> None:
        self._bridge = bridge
        self._held: collections.deque = collections.deque()
        #: Guards ``_held`` only; never held while a future is settled.
        self._lock = threading.Lock()
        self._in_flight = 0

    def hold(self, future: TaskFuture, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Queue a call (any thread)."""
        with self._lock:
            self._held.append((future, fn, args, kwargs))

    # ------------------------------------------------------------ loop thread
    def pump(self) -> None:
        """Send bundles while there is room in flight."""
        budget = IN_FLIGHT_PER_THREAD * max(1, self._bridge.worker_threads())
        while self._held and self._in_flight < budget:
            with self._lock:
                members = self._next_bundle(budget)
            if members:
                self._send(members)

    def send_now(self, future: TaskFuture) -> None:
        """Send one held call at once: its future is about to become an argument."""
        with self._lock:
            index = next((i for i, item in enumerate(self._held) if item[0] is future), None)
            item = None
            if index is not None:
                item = self._held[index]
                del self._held[index]
        if item is not None:
            self._send([item])

    def _next_bundle(self, budget: int) -> list[tuple]:
        fair_share = max(1, len(self._held) // budget)
        members: list[tuple] = []
        planned = 0.0
        while self._held and len(members) < fair_share:
            future, fn = self._held[0][:2]
            if future.done():  # cancelled while waiting here
                self._held.popleft()
                continue
            estimate = self._bridge.durations.get(fn)
            if estimate is None:  # unknown: goes alone, and gets measured
                if not members:
                    members.append(self._held.popleft())
                break
            if members and planned + estimate > TARGET_SECONDS:
                break
            members.append(self._held.popleft())
            planned += estimate
        return members

    def _send(self, members: list[tuple]) -> None:
        calls = [(fn, args, kwargs) for _, fn, args, kwargs in members]
        bundle = self._bridge.launch_internal(run_bundle, (calls,), _describe(members))
        if bundle is None:  # the bundle cannot be pickled: send each call alone
            for future, fn, args, kwargs in members:
                self._bridge.launch_alone(future, fn, args, kwargs)
            return
        self._in_flight += 1
        for index, (future, *_rest) in enumerate(members):
            future._bundle = (bundle, index)
            _mark_running(future)
        bundle.add_done_callback(lambda done: self._finished(done, members))

    def _finished(self, bundle: TaskFuture, members: list[tuple]) -> None:
        self._in_flight -= 1
        error = bundle.exception()
        if error is not None:  # the whole bundle failed (lost worker, unpicklable result...)
            for future, *_rest in members:
                self._bridge.settle(future, exception=error)
        else:
            self._deliver(bundle.result(), members)
        self.pump()

    def _deliver(self, outcome: BundleOutcome, members: list[tuple]) -> None:
        for (future, fn, *_rest), (ok, value), seconds in zip(
                members, outcome.results, outcome.seconds):
            self._bridge.durations.record(fn, seconds)
            if ok:
                self._bridge.settle(future, result=value)
            else:
                self._bridge.settle(future, exception=restore_traceback(value))


def _mark_running(future: TaskFuture) -> None:
    """Sent to a worker: like ``ProcessPoolExecutor``'s call queue, no longer cancellable."""
    try:
        future.set_running_or_notify_cancel()
    except RuntimeError:
        pass  # already settled (e.g. by a broken executor)


def _describe(members: list[tuple]) -> str:
    name = getattr(members[0][1], "__name__", "task")
    return name if len(members) == 1 else f"{name}-x{len(members)}"
