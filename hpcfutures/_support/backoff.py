"""Capped exponential back-off for the few waits that must poll.

Used where no event exists to await: a file that another rank will write, an
MPI message probed without blocking, a scheduler that is not up yet.
"""

from __future__ import annotations

import time

__all__ = ["Backoff"]


class Backoff:
    """Capped exponential back-off for the few waits that must poll."""

    def __init__(self, first: float = 0.005, cap: float = 0.1) -> None:
        self.delay, self.cap = first, cap

    def sleep(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self.delay, deadline - time.monotonic())))
        self.delay = min(self.delay * 2, self.cap)

