"""Draining before the allocation's end, and requeueing the job after it.

::

    executor starts     a thread asks the batch system when the allocation ends
                        (launchers/_endtime.py; the end_time setting wins)
    loop thread         checks every few seconds: end - now <= margin?
                        margin: drain_margin, else twice the longest measured
                        call, at least DRAIN_FLOOR
    drain               the bridge sends nothing more; calls never started (and
                        calls submitted later) fail with one TimeLimitError;
                        running calls finish, their results reach their futures
    user leaves `with`  the launch ends as always (every rank exits); then, with
                        requeue=True and calls refused, the job is requeued
                        (launchers/_requeue.py) and the client exits 99

SIGTERM (scancel, or a time limit nobody could read) still ends the launch at
once, as it does without a drain: results that came back before it are in their futures (and
the journal) already.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._errors import TimeLimitError
from ...launchers._endtime import AllocationEnd, find_end
from ...launchers._requeue import requeue_directive

__all__ = ["DRAIN_FLOOR", "Drain", "default_margin"]

logger = logging.getLogger("hpcfutures")

#: Seconds before the end the drain starts at the latest, whatever was measured:
#: time for the last results to come back and every rank to exit.
DRAIN_FLOOR = 30.0
#: The default margin is this many times the longest call measured so far.
DRAIN_FACTOR = 2.0
#: Seconds between two looks at the clock (the margin grows as calls are measured).
CHECK_EVERY = 5.0


def default_margin(longest_call: float | None) -> float:
    """The margin when none is set: room for the longest call twice over, at least the floor."""
    return max(DRAIN_FLOOR, DRAIN_FACTOR * (longest_call or 0.0))


class Drain:
    """Watches the clock against the allocation's end, and drains the bridge in time.

    Args:
        bridge: The executor's TaskBridge.
        settings: The executor's settings (``end_time``, ``drain_margin``, ``requeue``...).
        clock: Seconds since the epoch (the tests pass their own).
    """

    def __init__(self, bridge: Any, settings: Any,
                 clock: Callable[[], float] = time.time) -> None:
        self._bridge = bridge
        self._settings = settings
        self._clock = clock
        self.end: AllocationEnd | None = None
        self._found = threading.Event()

    def begin(self) -> Drain:
        """Ask for the end in a thread (the batch system may be slow); then watch.

        With ``drain_margin=0`` it asks nothing: the executor never drains.
        """
        if self._settings.drain_margin == 0:
            self._found.set()
            return self
        threading.Thread(target=self._find, name="hpcfutures-end-time", daemon=True).start()
        return self

    def _find(self) -> None:
        try:
            given = self._settings.sources.get("end_time", "default")
            self.end = find_end(self._settings.end_time, f"end_time from the {given}")
        finally:
            self._found.set()
        if self.end is None:
            return
        logger.info("the allocation ends at %s: the executor drains %g s before it",
                    self.end, self.margin())
        try:
            self._bridge.call_soon(self.check)
        except RuntimeError:  # the executor ended meanwhile
            pass

    def margin(self) -> float:
        if self._settings.drain_margin is not None:
            return float(self._settings.drain_margin)
        return default_margin(self._bridge.batcher.durations.longest())

    def check(self) -> None:
        """Drain if it is time, else look again soon (loop thread)."""
        if self.end is None or self._bridge.ended():
            return
        wait = self.end.left(self._clock()) - self.margin()
        if wait <= 0:
            self.start()
        else:
            self._bridge.call_later(min(wait, CHECK_EVERY), self.check)

    def start(self) -> int:
        """Drain now: returns how many calls were refused."""
        assert self.end is not None
        refused = self._bridge.drain(TimeLimitError(self.message()))
        logger.warning("the allocation ends in %.0f s (%s): the executor drained; %d call(s) "
                       "not started fail with TimeLimitError, running ones finish",
                       self.end.left(self._clock()), self.end.source, refused)
        return refused

    def message(self) -> str:
        assert self.end is not None
        when = datetime.datetime.fromtimestamp(self.end.epoch, datetime.timezone.utc)
        journal = self._bridge.journal_note()
        if journal is None:
            resume = ("no journal was set, so a rerun starts over: Executor(journal=PATH) "
                      "keeps every result and a rerun with the same journal resumes")
        else:
            resume = (f"{journal}; run the script again with the same journal to resume "
                      f"(requeue=True and {requeue_directive()} in the job script do that "
                      "for a batch job)")
        return (f"this call was not started: the allocation ends at {when:%H:%M:%S} UTC "
                f"({self.end.source}) and the executor stopped sending calls "
                f"{self.margin():.0f} s before (drain_margin); {resume}")

    # ------------------------------------------------------------- requeue
    def requeue_if_wanted(self) -> int | None:
        """After the launch ended: requeue the job if it drained with calls left and
        ``requeue`` is set; the status to exit with when it was requeued."""
        if self._bridge.drained is None or not self._bridge.refused:
            return None
        if not self._settings.requeue:
            return None
        from ...launchers._requeue import REQUEUED_STATUS, requeue_job

        journal = self._bridge.journal_note()
        then = ("its rerun resumes from the journal" if journal is not None else
                "no journal was set, so its rerun starts over")
        outcome = requeue_job(self._settings.max_requeues, then,
                              added=self._bridge.journal_added())
        if not outcome.requeued:
            logger.warning("%s", outcome.message)
            return None
        return REQUEUED_STATUS
