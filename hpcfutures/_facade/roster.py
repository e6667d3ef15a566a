"""The workers the client has seen, so that one that leaves can be named.

Dask tells the client how many workers there are, not which ones left; when a
rank dies the user wants "rank 37 (worker), read its log", not "a worker".
The bridge's watch loop asks the scheduler for the workers' names whenever the
count changes (rarely), and the roster compares them with the last answer.
Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["WorkerRoster"]

logger = logging.getLogger("hpcfutures")

#: Lost workers named one by one in a broken executor's message.
NAMED = 4


def _by_name(name: str) -> tuple[str, str]:
    """(who, where to look) for a worker known only by its Dask name."""
    return f"worker {name}", "see its output"


class WorkerRoster:
    """Names of the workers present, and of those that left before the end."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}  # address -> name
        self.hosts: dict[str, str] = {}  # name -> host, once seen
        self.lost: list[str] = []
        #: name -> (who, where to look); the client side knows how ranks name their logs.
        self.pointer: Callable[[str], tuple[str, str]] = _by_name

    async def refresh(self, client: Client, ending: Callable[[], bool]) -> None:
        """Ask the scheduler who is there; warn about each worker gone since
        (unless ``ending()``: then workers leave because the launch is over)."""
        from .. import _dask

        try:
            places = await asyncio.wait_for(_dask.worker_places(client), 5)
        except Exception:  # the scheduler is gone: the bridge says so
            return
        now = {address: place.name for address, place in places.items()}
        self.hosts.update((place.name, place.host) for place in places.values() if place.host)
        gone = [name for address, name in self.seen.items() if address not in now]
        self.seen = now
        if ending() or not gone:
            return
        for name in set(gone) & await _released(client):
            gone.remove(name)
            logger.info("worker %s retired after being idle (release_idle_after)", name)
        for name in gone:
            who, where = self.pointer(name)
            self.lost.append(name)
            host = self.hosts.get(name)
            on = f"on {host}; " if host else ""
            logger.warning("%s left the launch before the end (%sits unfinished tasks run "
                           "again on the other workers); %s", who, on, where)

    def describe_lost(self) -> str:
        """The lost workers and where to read about them, for an error message."""
        if not self.lost:
            return "see the workers' output"
        named = [self._describe(name) for name in self.lost[:NAMED]]
        more = len(self.lost) - len(named)
        return "lost " + "; ".join(named) + (f"; and {more} more" if more > 0 else "")

    def _describe(self, name: str) -> str:
        """``rank 4 (worker) on node17: read ...`` for the worker named ``name``."""
        who, where = self.pointer(name)
        host = self.hosts.get(name)
        return f"{who} on {host}: {where}" if host else f"{who}: {where}"


async def _released(client: Client) -> set[str]:
    """Workers the scheduler retired on purpose (release_idle_after): not lost."""
    from .. import _dask

    try:
        return await asyncio.wait_for(_dask.released_workers(client), 5)
    except Exception:  # release is off (no such handler), or the scheduler is gone
        return set()
