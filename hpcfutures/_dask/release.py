"""Hand idle workers back to the cluster while the launch goes on.

A computation that narrows (a reduction: 100 workers, then 10, then 1) holds
resources it no longer uses.  When each worker is its own batch job (a job
array element), a worker that retires ends its job and the batch system gives
its CPUs and memory to someone else; the scheduler and the client keep going.

The scheduler rank runs :class:`IdleRelease`.  A worker counts as idle when it
has no task assigned to it and the scheduler has none waiting.  Once it has
been idle for ``idle_after`` seconds, and more than ``keep`` workers remain,
Dask's own ``retire_workers`` moves whatever results it holds to the others
(nothing is lost) and stops it from taking new work; only then is the worker
told that, for it, the launch ended well (status 0), and closed.  Its rank
exits 0, so its array element ends COMPLETED.

The rule reads the scheduler's own state directly (``unrunnable``, each
``WorkerState``'s ``processing`` and ``status``; hpcfutures' scheduler keeps no
queue: its worker saturation is infinite, see tuning.without_a_queue), with
no fallback: were Dask to rename one, the check fails (and no worker is
released) instead of reading "nothing waits" and retiring workers while work
waits.  ``tests/test_dask_seams.py`` pins each name against a real scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Scheduler

__all__ = ["IdleRelease"]

logger = logging.getLogger("hpcfutures")


class IdleRelease:
    """Retire workers idle for ``idle_after`` s, keeping at least ``keep`` of them."""

    def __init__(self, scheduler: Scheduler, idle_after: float, keep: int,
                 say_goodbye: Callable[[str], None],
                 started: Callable[[], bool] = lambda: True,
                 held: Callable[[str], bool] = lambda address: False) -> None:
        self.scheduler = scheduler
        #: Whether work can have started: before a client connects, workers
        #: that wait for it are not idle (a queue may hold the client for hours).
        self.started = started
        #: Whether an MPI task holds a worker (see mpigroups.py): never idle then.
        self.held = held
        self.idle_after = idle_after
        self.keep = max(1, keep)
        #: Sends a retiring worker its exit status before it is closed.
        self.say_goodbye = say_goodbye
        #: Names of the workers retired so far (the client asks, so as not to
        #: report them as lost).
        self.released: list[str] = []
        #: Addresses of the workers being retired (no MPI task may have them).
        self.retiring: set[str] = set()
        self._idle_since: dict[str, float] = {}

    def _busy(self) -> bool:
        """Work is waiting that no worker can run yet (a worker with what it needs may
        join); everything else is given to a worker at once (no queue)."""
        return bool(self.scheduler.unrunnable)

    def idle_workers(self, now: float) -> list[str]:
        """Addresses of the workers idle for long enough, longest idle first."""
        workers = self.scheduler.workers
        for address in list(self._idle_since):
            if address not in workers:
                del self._idle_since[address]
        if self._busy() or not self.started():
            self._idle_since.clear()
            return []
        for address, state in workers.items():
            if state.processing or state.status.name != "running" or self.held(address):
                self._idle_since.pop(address, None)
            else:
                self._idle_since.setdefault(address, now)
        ready = [a for a, since in self._idle_since.items() if now - since >= self.idle_after]
        return sorted(ready, key=self._idle_since.__getitem__)

    async def run(self, interval: float | None = None) -> None:
        """Check every ``interval`` s (a quarter of ``idle_after``, at most 1 s) until cancelled."""
        interval = interval or min(1.0, max(0.05, self.idle_after / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.release_once(time.monotonic())
            except asyncio.CancelledError:
                raise
            except Exception:  # never let this take the scheduler down
                logger.debug("releasing idle workers failed", exc_info=True)

    async def release_once(self, now: float) -> list[str]:
        """Retire the workers idle for long enough; return the addresses retired."""
        spare = len(self.scheduler.workers) - self.keep
        candidates = self.idle_workers(now)[:max(0, spare)]
        if not candidates:
            return []
        self.retiring.update(candidates)
        try:
            retired = await self.scheduler.retire_workers(
                workers=candidates, close_workers=False, remove=False,
                stimulus_id=f"hpcfutures-release-idle-{now}")
        finally:
            self.retiring.difference_update(candidates)
        for address in retired:
            self._idle_since.pop(address, None)
            self.say_goodbye(address)
            self.scheduler.close_worker(address)
            name = str(retired[address].get("name", address))
            self.released.append(name)
            logger.info("released worker %s after %g s idle", name, self.idle_after)
        return list(retired)
