"""The workers the client has seen, so that one that leaves can be named.

Dask tells the client how many workers there are, not which ones left; when a
rank dies the user wants "rank 37 (worker), read its log", not "a worker".
The bridge's watch loop asks the scheduler which workers joined and left since
its last question whenever the count changes, and the roster keeps the names
and hosts of those present: a question costs what changed, not the size of the
launch (see ``_dask.WorkerChanges``).  Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._support.waves import WaveLog

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
        #: The number of the scheduler's next change to ask for.
        self._next = 0
        #: name -> (who, where to look); the client side knows how ranks name their logs.
        self.pointer: Callable[[str], tuple[str, str]] = _by_name
        #: Departures a few at a time, as a wave spread over several questions brings
        #: them: one line for the first, one summary for those that follow it soon.
        self._departures = WaveLog(logger, "worker left the launch before the end",
                                   "workers left the launch before the end")

    async def refresh(self, client: Client, ending: Callable[[], bool],
                      timeout: float = 5.0) -> None:
        """Ask the scheduler who is there; warn about each worker gone since
        (unless ``ending()``: then workers leave because the launch is over)."""
        from ... import _dask

        try:
            self._next, changes = await asyncio.wait_for(
                _dask.worker_changes(client, self._next), timeout)
        except Exception:  # the scheduler is gone: the bridge says so
            return
        gone: list[str] = []
        for _kind, address, place in changes:
            if place is not None:
                self.seen[address] = place.name
                if place.host:
                    self.hosts[place.name] = place.host
            elif address in self.seen:
                gone.append(self.seen.pop(address))
        if ending() or not gone:
            return
        for name in set(gone) & await _released(client):
            gone.remove(name)
            logger.info("worker %s retired after being idle (release_idle_after)", name)
        self.lost.extend(gone)
        if len(gone) <= NAMED:
            for name in gone:
                who, where = self.pointer(name)
                host = self.hosts.get(name)
                on = f"on {host}; " if host else ""
                self._departures.add(f"{who} left the launch before the end ({on}its "
                                     f"unfinished tasks run again on the other workers); {where}",
                                     f"on {host}" if host else "host unknown")
            return
        self._departures.flush()
        # A wave (a node lost, a job step killed): one line, not one per worker.
        hosts = sorted({self.hosts[name] for name in gone if name in self.hosts})
        named = ", ".join(self.pointer(name)[0] for name in gone[:NAMED])
        on = (f" on {len(hosts)} host(s) ({', '.join(hosts[:NAMED])}"
              f"{', ...' if len(hosts) > NAMED else ''})" if hosts else "")
        logger.warning("%d workers left the launch at once before the end%s: %s and %d more; "
                       "their unfinished tasks run again on the other workers; %s", len(gone),
                       on, named, len(gone) - NAMED, self.pointer(gone[0])[1])

    def flush(self) -> None:
        """Log the summary of departures still held (the client is leaving)."""
        self._departures.flush()

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
    from ... import _dask

    try:
        return await asyncio.wait_for(_dask.released_workers(client), 5)
    except Exception:  # release is off (no such handler), or the scheduler is gone
        return set()
