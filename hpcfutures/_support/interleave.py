"""Seeded pauses at the steps where a launch's ranks race each other, for testing.

Ranks of one launch start seconds apart, and each step of finding the scheduler
(reading its file, connecting, the scheduler closing and marking the launch
finished) can meet any step of another rank.  ``HPCFUTURES_INTERLEAVE=SEED:MAX``
makes each named point below pause for a time drawn from ``SEED``, the rank and
the point, up to ``MAX`` seconds, so a harness can replay one interleaving at will
(``benchmarks/interleave.py``).  Unset (always, outside of tests), every pause is 0
and costs one dictionary look-up.

Points: ``before-read`` (a rank is about to read the scheduler file),
``before-connect`` (it has read an address and is about to knock),
``scheduler-closing`` (the scheduler has closed and not yet marked the launch
finished).
"""

from __future__ import annotations

import asyncio
import os
import random
import zlib

__all__ = ["POINTS", "VARIABLE", "pause", "paused"]

VARIABLE = "HPCFUTURES_INTERLEAVE"
POINTS = ("before-read", "before-connect", "scheduler-closing")


def pause(point: str, rank: int) -> float:
    """Seconds rank ``rank`` should wait at ``point``; 0 unless :data:`VARIABLE` is set.

    Each visit of a point draws anew, from a generator seeded by the seed, the
    rank and the point, so one seed replays the same sequence of pauses.
    """
    setting = os.environ.get(VARIABLE)
    if not setting:
        return 0.0
    if point not in POINTS:
        raise ValueError(f"unknown interleaving point {point!r}; known: {', '.join(POINTS)}")
    seed, _, most = setting.partition(":")
    try:
        longest = float(most or "1")
    except ValueError:
        raise ValueError(f"{VARIABLE}={setting!r}: expected SEED:MAX_SECONDS") from None
    key = (rank, point)
    draws = _draws.get(key)
    if draws is None:
        draws = _draws[key] = random.Random(zlib.crc32(f"{seed}/{rank}/{point}".encode()))
    return draws.uniform(0.0, longest)


async def paused(point: str, rank: int) -> None:
    """Wait :func:`pause` seconds (at once when it is 0) on the event loop."""
    delay = pause(point, rank)
    if delay:
        await asyncio.sleep(delay)


#: One generator per (rank, point) in this process.
_draws: dict[tuple[int, str], random.Random] = {}
