"""The pace this launch sustains, learnt from the groups that come back.

The batching engine sizes groups so that every worker thread finishing its
groups asks the scheduler for no more tasks a second than the launch can
hand out (the *pace*, ``batching.py``).  Dask's own figure, about a thousand a
second, assumes a scheduler and every worker on cores of their own; a launch
whose workers share cores, or whose scheduler shares its node, sustains less
(a few hundred a second for 1,000 workers hosted on a 2-core machine), and
sized for a thousand its threads then wait for their next task longer than
they compute.

So each group's worker says how long its thread sat idle before the group
began, and the client bounds that by how long the group waited between its
dispatch and its start (a thread idle because there was nothing to do is not
the launch's fault).  Over a window of groups, when the threads computed less
than :data:`LOW_UTILIZATION` of the time, a thread's whole cycle (a group's
work, then the wait for the next) is what the launch hands out at: threads /
rate.  Groups then carry :data:`HEADROOM` times that cycle.  Where the wait is
a fixed cost per group instead (a round trip), the pace grows only until the
work is four times that cost.  When the threads compute nearly all the time
again, the pace shortens window by window, back to the nominal one.

Only launches whose nominal pace exceeds a group's target duration learn
(many threads): below that, a thread's idle time between groups is its
round trip, not a queue at the scheduler.  The learnt pace never exceeds
:data:`CEILING` times the nominal one, so a wrong reading costs at most that
factor in group size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["CEILING", "HEADROOM", "LOW_UTILIZATION", "Pacing", "waited"]

logger = logging.getLogger("hpcfutures")

#: Fraction of their time the threads must compute, over a window, for the
#: groups' sizes to be left as they are.
LOW_UTILIZATION = 0.8
#: Above this fraction the learnt pace relaxes.
HIGH_UTILIZATION = 0.95
#: A group carries this much more than a thread's whole cycle (computing, then
#: waiting for the next group) was seen to take: the scheduler is asked for a
#: fraction of the rate it was seen to sustain.
HEADROOM = 1.25
#: How far the learnt pace may exceed the nominal one (a bound on a wrong reading).
CEILING = 8.0
#: Seconds of groups coming back that make one window, at least...
WINDOW_SECONDS = 1.0
#: ... and groups, at least this fraction of the threads (a window of a few
#: groups is the start of a map, its probes waiting behind the first round,
#: or its end, where idle threads take over queued groups).
WINDOW_SHARE = 0.25
#: Factor by which a window of busy threads shortens the learnt pace.
RELAX = 1.25


class Pacing:
    """The pace groups are sized for (the batching engine's lock held by callers)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: The pace learnt from this launch's groups, s; None while the nominal one holds.
        self.learnt: float | None = None
        self._clock = clock
        self._since: float | None = None
        self._groups = 0
        self._busy = 0.0
        self._idle = 0.0

    def pace(self, nominal: float) -> float:
        """Seconds of work a group carries at least: ``nominal`` (threads / Dask's
        rate), or more where the launch showed that it sustains less."""
        if self.learnt is None:
            return nominal
        return min(max(self.learnt, nominal), nominal * CEILING)

    def observe(self, busy: float, idle: float, threads: int) -> None:
        """A group came back: ``busy`` s computing, after its thread sat ``idle`` s
        waiting for it (already bounded by the group's own wait)."""
        now = self._clock()
        if self._since is None:
            self._since = now
        self._groups += 1
        self._busy += max(busy, 0.0)
        self._idle += max(idle, 0.0)
        if (now - self._since < WINDOW_SECONDS
                or self._groups < max(1.0, WINDOW_SHARE * threads)):
            return
        total = self._busy + self._idle
        utilization = self._busy / total if total > 0 else 1.0
        if utilization < LOW_UTILIZATION:
            # Every thread computed, then waited: when the scheduler hands out
            # groups as fast as it can, a thread's cycle is threads / its rate.
            self.learnt = HEADROOM * total / self._groups
            logger.debug("worker threads computed %.0f %% of the time over %d groups: "
                         "groups now carry at least %.2f s of work", 100 * utilization,
                         self._groups, self.learnt)
        elif utilization > HIGH_UTILIZATION and self.learnt is not None:
            self.learnt /= RELAX
        self._since, self._groups, self._busy, self._idle = now, 0, 0.0, 0.0


def waited(idle: float | None, sent_at: float | None, busy: float,
           now: float | None = None) -> float | None:
    """Seconds a group's thread sat idle for want of it: what its worker measured
    (``idle``), at most the time the group spent between its dispatch at
    ``sent_at`` and its start (a thread idle before that had nothing to do)."""
    if idle is None or sent_at is None:
        return None
    on_its_way = (time.monotonic() if now is None else now) - sent_at - busy
    return max(0.0, min(idle, on_its_way))
