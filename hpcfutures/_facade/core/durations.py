"""How long each function's calls take on the workers, learned as tasks finish.

The batching engine (:mod:`.batching`) sizes every group of calls, ``map``
chunks and ``submit`` bundles alike, from these estimates, and keeps them for
the executor's lifetime, so the second ``map`` of a function starts with
well-sized chunks instead of measuring again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Durations"]

#: Weight of the newest measurement in a function's running estimate.
SMOOTHING = 0.5


def function_key(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


class Durations:
    """Seconds per call, by function (thread-safe)."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def get(self, fn: Callable[..., Any]) -> float | None:
        return self._seconds.get(function_key(fn))

    def longest(self) -> float | None:
        """The longest estimate of any function so far (None before the first measurement)."""
        with self._lock:
            return max(self._seconds.values(), default=None)

    def record(self, fn: Callable[..., Any], seconds: float) -> None:
        key = function_key(fn)
        with self._lock:
            previous = self._seconds.get(key)
            self._seconds[key] = seconds if previous is None else (
                previous + SMOOTHING * (seconds - previous))
