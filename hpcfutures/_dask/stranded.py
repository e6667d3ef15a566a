"""Calls whose needs no worker left can meet: failed with a reason, never left waiting.

A call that states needs (cores, GPUs, memory: ``_support/needs.py``) waits in
Dask's ``unrunnable`` set while no worker present has that much.  That is
right while workers may still come; once every worker the launch can have
has joined (its capacity, when known: not for a serving launch, whose
workers may come later), a worker that leaves never comes back, and a call
only the departed could run would wait forever.  After each departure, and
whenever a call with needs becomes unrunnable, the scheduler looks (soon,
outside Dask's transition) and fails such calls with
:class:`~hpcfutures.NoSuitableWorkerError`, naming what they asked for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import NoSuitableWorkerError
from .._support.needs import Needs, describe_resources

if TYPE_CHECKING:
    from distributed import Scheduler

__all__ = ["Stranded"]


class Stranded:
    """The scheduler's watch over unrunnable calls with needs (a Coordinator helper).

    Args:
        complete: Whether every worker the launch can have has joined.
    """

    def __init__(self, complete: Callable[[], bool]) -> None:
        self._complete = complete
        self._scheduler: Scheduler | None = None
        self._due = False

    def install(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def look_soon(self) -> None:
        """After a departure or a call gone unrunnable: look once the loop is free."""
        if self._due or self._scheduler is None or not self._complete():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a unit test's stand-in scheduler, outside a loop
            return
        self._due = True
        loop.call_soon(self.fail_stranded)

    def fail_stranded(self) -> list[Any]:
        """Fail every unrunnable call with needs that no worker present meets; their keys."""
        self._due = False
        scheduler = self._scheduler
        if scheduler is None or not self._complete():
            return []
        failed = []
        have = [dict(ws.resources) for ws in scheduler.workers.values()]
        for ts in list(scheduler.unrunnable):
            needs = dict(getattr(ts, "resource_restrictions", None) or {})
            if not needs or any(_fits(needs, resources) for resources in have):
                continue
            failed.append(ts.key)
            self._fail(scheduler, ts.key, needs, have)
        return failed

    @staticmethod
    def _fail(scheduler: Scheduler, key: Any, needs: dict[str, float],
              have: list[dict[str, float]]) -> None:
        from distributed.protocol import pickle

        asked = Needs.from_resources(needs)
        left = "; ".join(sorted({describe_resources(r) for r in have})[:4]) or "none"
        error = NoSuitableWorkerError(
            f"a call asks for {asked}, but no worker left in this launch has that much: the "
            f"workers that had it are gone (lost, or released as idle) and no other can come "
            f"(the workers left have: {left})")
        stimulus = f"hpcfutures-stranded-{time.time()}"
        recommendations = scheduler.transition(key, "erred", stimulus_id=stimulus,
                                               exception=pickle.dumps(error), cause=key)
        scheduler.transitions(recommendations, stimulus_id=stimulus)


def _fits(needs: dict[str, float], resources: dict[str, float]) -> bool:
    return all(resources.get(name, 0) >= amount for name, amount in needs.items())
