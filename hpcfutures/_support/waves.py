"""Waves of events (deaths, failed starts, departures) logged as one line and a summary.

A rack that loses power takes hundreds of workers with it, and 150 workers
starting on one node all meet the same slow lock files: a line per worker buries
the one line that says what happened.  Used by the scheduler (deaths, failed
starts, slow scratch directories) and the client (workers that left).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Mapping

__all__ = ["WAVE_REPORT_EVERY", "WAVE_WINDOW", "WaveLog", "count_causes"]

#: Events of a kind (deaths, failed starts) that come within this many seconds
#: of the one before belong to one wave, logged as one line (see WaveLog) ...
WAVE_WINDOW = 1.0
#: ... and a wave that goes on logs its summary at least this often.
WAVE_REPORT_EVERY = 10.0


def count_causes(causes: Mapping[str, int], most: int = 4) -> str:
    """``990 lost, 5 killed by SIGKILL``: the commonest causes first, at most ``most``
    of them named (a message about 10,000 workers stays one short line)."""
    ranked = sorted(((n, why) for why, n in causes.items() if n > 0),
                    key=lambda item: (-item[0], item[1]))
    words = [f"{n} {why}" for n, why in ranked[:most]]
    other = sum(n for n, _ in ranked[most:])
    if other:
        words.append(f"{other} for {len(ranked) - most} other reason(s)")
    return ", ".join(words)


class WaveLog:
    """Log one line for an isolated event, one summary line for a wave of them.

    A rack that loses power takes hundreds of workers with it; a line per
    worker on the scheduler's console buries the one line that says what
    happened (the client reports the consequences).  The first event logs
    its line at WARNING at once, as an isolated one does; the events
    that follow it within ``WAVE_WINDOW`` s of each other are counted by
    cause and logged together as one WARNING line once the wave is over (or
    every ``WAVE_REPORT_EVERY`` s while it goes on): "N more workers died
    within X s: <counts by cause>; the first few: ...".  Each folded event's
    own line still goes to the log at INFO (a rank's log file keeps them).

    Without a running event loop (nothing could log the summary later) every
    line is logged at once.
    """

    def __init__(self, log: logging.Logger, one: str, many: str, examples: int = 3,
                 expecting: Callable[[], bool] = lambda: False, advice: str = "") -> None:
        self.log, self.one, self.many, self.examples = log, one, many, examples
        #: What to do about such events: said once per line, after the examples.
        self.advice = f" ({advice})" if advice else ""
        #: Whether more of the wave is known to be on its way: it stays open meanwhile.
        self.expecting = expecting
        self.window, self.report_every = WAVE_WINDOW, WAVE_REPORT_EVERY
        #: When the wave's first event (logged at once) and its latest came; None: no wave.
        self._opened: float | None = None
        self._latest = 0.0
        #: The events held for the summary: their count, causes, first lines, first time.
        self._held = 0
        self._causes: collections.Counter[str] = collections.Counter()
        self._lines: list[str] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, line: str, why: str) -> None:
        now = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self._opened is None or (
                now - self._latest > self.window and not self.expecting()):
            self.flush()
            self.log.warning("%s%s", line, self.advice)
            if loop is not None:
                self._opened = self._latest = now
                self._timer = loop.call_later(self.window, self._check)
            return
        self.log.info("%s%s", line, self.advice)
        self._latest = now
        self._held += 1
        self._causes[why] += 1
        if len(self._lines) < self.examples:
            self._lines.append(line)

    def _check(self) -> None:
        """Log the held summary once the wave is quiet (or has gone on long enough)."""
        self._timer = None
        if self._opened is None:
            return
        now = time.monotonic()
        quiet = now - self._latest >= self.window and not self.expecting()
        if quiet or now - self._opened >= self.report_every:
            self._report()
        if quiet:
            self._opened = None
            return
        due = min(self._latest + self.window, self._opened + self.report_every)
        if due <= now:  # quiet, but more is expected: look again in a window's time
            due = now + self.window
        self._timer = asyncio.get_running_loop().call_later(due - now, self._check)

    def _report(self) -> None:
        if not self._held:
            return
        assert self._opened is not None
        what = self.one if self._held == 1 else self.many
        spread = f"{self._held} more {what} within {self._latest - self._opened:.1f} s"
        if self._held <= self.examples:
            self.log.warning("%s: %s%s", spread, "; ".join(self._lines), self.advice)
        else:
            self.log.warning("%s: %s; the first few: %s%s", spread, count_causes(self._causes),
                             "; ".join(self._lines), self.advice)
        self._held = 0
        self._causes.clear()
        self._lines.clear()
        self._opened = time.monotonic()  # the next summary counts from here

    def flush(self) -> None:
        """Log what is held now and end the wave (the next event is logged at once)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._opened is not None:
            self._report()
        self._opened = None
