"""A lone call goes straight to a worker when the executor has nothing else in flight.

A loop that submits one call and waits for it (an optimiser's ask and tell, a
chain whose next step depends on a look at the last result) pays a full
round trip per call.  Through the scheduler that is four messages between
processes and the scheduler's own work on two of them, about 3 ms in the laptop default; sent
straight to a worker, whose answer carries the outcome, about 1 ms
(``_dask/direct.py``; figures in benchmarks/README.md).  Nothing is lost by
leaving the scheduler out when nothing else is in flight: every worker is
idle, so there is no placement to decide.

But the scheduler does not see the call either: while it runs, its worker is
idle to the scheduler's eyes.  So nothing else is sent while a call is out this
way (:meth:`DirectLane.asking`): the calls submitted meanwhile wait for its
answer, about a millisecond, and then go the usual way.  Sent at once, one
could be placed on that worker and wait behind it, or start first on a worker
of one thread and hold the lone call, submitted before it, behind a slow call
of its own.  And only calls of a function known to be short go this way
(:data:`SHORT_CALL`, the batching engine's estimate): the wait they cause is as
short as the time they save.  A function's first call, and
the calls of one that takes longer, go through the scheduler.  Anything else
goes the usual way too:
a second call in flight, a call that states needs (the scheduler places it
by its resources), a call that cannot be pickled (the usual way names what),
a launch whose workers may retire while idle (``release_idle_after``: the
scheduler would not see the call), a client that cannot reach the workers
(SSH), or the end-of-run summary on (its counts are the scheduler's).

The call stays a bundle of one (``bundles.py``), so it is delivered, timed
and paced as any bundle.  Should its worker be lost under it, the death
certificate decides as for any task (``recovery.py``): a call that killed
its worker fails with ``WorkerCrashError``, any other is sent again, the
usual way.  A worker that refuses (closing, paused) gets the call sent the
usual way at once, and is asked no more.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from ..._remote.calls import restore_traceback, run_bundle
from ..._remote.carried import Carried
from ..._support.loop import loop_thread_only
from .completions import as_serialization_error
from .engine import Engine
from .futures import TaskFuture, settle

__all__ = ["SHORT_CALL", "DirectLane"]

logger = logging.getLogger("hpcfutures")

#: Seconds a function's calls may take, by the batching engine's estimate, to go
#: straight to a worker: about ten times the 2 ms the lane saves, so that a lone
#: call of a longer function loses under 20 % by going the usual way, and a call
#: placed on its worker meanwhile waits no longer than that.
SHORT_CALL = 0.01


class DirectLane:
    """Sends lone calls straight to a worker, and takes care of their ends.

    Args:
        client: The Dask client.
        engine: The engine (the bridge) it is part of: the workers present
            (``roster.seen``), a function's seconds per call so far
            (``batcher.durations``), the usual way for a call that cannot go
            this one (``sender.resend``), the judge of a group lost with its
            worker (``recovery.lost_directly``), coroutines on the loop
            (``in_background``), and ``wake`` once a worker answered (or
            failed to), for what waited.
    """

    def __init__(self, client: Any, engine: Engine) -> None:
        from ... import _dask  # the client is connected: distributed is imported already

        self._dask = _dask
        self._client = client
        self._engine = engine
        #: Calls sent whose worker has not answered yet.
        self._asking = 0
        #: Whether this launch allows direct calls at all (the client side decides).
        self.enabled = False
        #: Workers that refused a call or were lost under one: never asked again.
        self._avoided: set[str] = set()
        self._prefix = f"hpcf-direct-{uuid.uuid4().hex[:8]}-"
        self._counter = itertools.count()
        #: Calls sent this way, and those that went the usual way in the end.
        self.sent = 0
        self.rerouted = 0

    def takes(self, fn: Callable[..., Any]) -> bool:
        """Whether a lone call of ``fn`` may go this way: the lane is on, and ``fn``
        is known to be short."""
        if not self.enabled:
            return False
        seconds = self._engine.batcher.durations.get(fn)
        return seconds is not None and seconds <= SHORT_CALL

    @loop_thread_only
    def launch(self, calls: list) -> TaskFuture | None:
        """Send a bundle of one call (functions already shipped; :meth:`takes` said
        yes) to a worker; its group's future, or None when it must go the usual way."""
        worker = next((address for address in self._engine.roster.seen
                       if address not in self._avoided), None)
        if worker is None:
            return None
        try:
            packed = self._dask.pack_calls(Carried(calls, {}))  # Dask never reads them
        except Exception:  # the usual way says which part cannot be pickled
            return None
        key = f"{self._prefix}{next(self._counter)}"
        group = TaskFuture()
        group._call.sending((run_bundle, None, (calls,), {}, False))
        self.sent += 1
        self._asking += 1
        self._engine.in_background(self._run(group, worker, key, packed))
        return group

    def asking(self) -> bool:
        """Whether a call sent this way waits for its worker's answer: nothing else
        may be sent meanwhile (see the module's docstring)."""
        return self._asking > 0

    def avoid(self, worker: str) -> None:
        """``worker`` left the cluster: never ask it again."""
        self._avoided.add(worker)

    async def _run(self, group: TaskFuture, worker: str, key: str, packed: Any) -> None:
        try:
            outcome = await self._dask.call_direct(self._client, worker, key, packed)
        except asyncio.CancelledError:
            raise
        except self._dask.DirectRefused as err:
            logger.debug("%s; sent the usual way", err)
            self._avoided.add(worker)
            self._reroute(group)
        except self._dask.DirectLost as err:
            logger.debug("%s (call %s)", err, key)
            self._avoided.add(worker)
            self.rerouted += 1
            self._engine.recovery.lost_directly(group, key, worker)
        except Exception as err:  # the runner's own failure, or an unpicklable result
            settle(group, exception=as_serialization_error(restore_traceback(err)))
        else:
            settle(group, result=outcome)
        finally:
            self._asking -= 1
            self._engine.wake()

    def _reroute(self, group: TaskFuture) -> None:
        if not group.done() and group._call.recipe is not None:
            self.rerouted += 1
            self._engine.sender.resend(group, group._call.recipe)
