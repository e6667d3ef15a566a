"""The end-of-run summary: was the allocation well used?

Two sources, because neither alone knows everything::

    client     CallTally     user calls that came back, and how many raised
                             (exact: it sees every future and every map item)
    scheduler  UsageLedger   per worker: busy seconds, calls, presence; calls
    (_dask/usage.py)         re-run after a lost worker

hpcfutures packs many user calls into one Dask task (map chunks, submit
bundles), so with ``summary`` on the client gives each task that carries other
than one call a Dask annotation, :data:`CALLS_ANNOTATION`, with the number
(``_facade/core/sending.py``), and the ledger reads it from the task's state.  This
module formats; it reads nothing of Dask's (the ledger is a Dask scheduler
plug-in, so it lives in :mod:`hpcfutures._dask`).  Nothing here runs unless
``summary`` is on.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CALLS_ANNOTATION", "CallTally", "format_summary"]

#: The Dask annotation that holds how many user calls a task carries (1 if absent).
CALLS_ANNOTATION = "hpcfutures_calls"
#: Workers listed one by one; more are summed up in one line.
MAX_ROWS = 16


class CallTally:
    """Counts, on the client, the user calls that came back and those that raised."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.ready: float | None = None
        self.calls = 0
        self.failed = 0
        self._lock = threading.Lock()

    def mark_ready(self) -> None:
        """The executor is usable: what came before was start-up."""
        self.ready = time.monotonic()

    def calls_done(self, calls: int, failed: int = 0) -> None:
        with self._lock:
            self.calls += calls
            self.failed += failed

    def future_done(self, future: Any) -> None:
        """Done-callback of a ``submit`` future; a cancelled call never ran."""
        if not future.cancelled():
            self.calls_done(1, int(future.exception() is not None))


def _row(name: str, threads: Any, calls: Any, busy: str, share: str) -> str:
    return f"  {name:<28} {threads:>7} {calls:>9} {busy:>9} {share:>6}"


def _share(busy: float, capacity: float) -> str:
    return f"{100 * busy / capacity:.0f}%" if capacity > 0 else "-"


def _worker_rows(workers: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for entry in sorted(workers, key=lambda w: _natural(w["name"]))[:MAX_ROWS]:
        host = str(entry.get("host") or "")
        on_loopback = not host or host.startswith("127.") or host in ("::1", "localhost")
        where = entry["name"] if on_loopback else f"{entry['name']} on {host}"
        gone = " (lost)" if entry.get("lost") else ""
        gpus, needing = int(entry.get("gpus") or 0), int(entry.get("needing") or 0)
        said = [f"{gpus} GPU{'s' if gpus > 1 else ''}"] if gpus else []
        said += [f"{needing} with needs"] if needing else []
        where += f" ({', '.join(said)})" if said else ""
        rows.append(_row(where + gone, entry["threads"], entry["calls"],
                         f"{entry['busy']:.1f}", _share(entry["busy"],
                                                        entry["present"] * entry["threads"])))
    if len(workers) > MAX_ROWS:
        shares = sorted(100 * w["busy"] / max(w["present"] * w["threads"], 1e-9)
                        for w in workers)
        rows.append(f"  ... and {len(workers) - MAX_ROWS} more workers (busy: least "
                    f"{shares[0]:.0f}%, median {statistics.median(shares):.0f}%, "
                    f"most {shares[-1]:.0f}%)")
    return rows


def _natural(name: str) -> tuple:
    """rank-2 before rank-10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def format_summary(tally: CallTally, usage: Mapping[str, Any] | None,
                   ended: float | None = None) -> str:
    """The summary table; ``usage`` is the scheduler's report, None if it was unreachable."""
    ended = time.monotonic() if ended is None else ended
    wall = ended - tally.started
    startup = (tally.ready - tally.started) if tally.ready is not None else wall
    head = (f"hpcfutures summary: {tally.calls} calls run, {tally.failed} failed; "
            f"wall time {wall:.1f} s (start-up {startup:.1f} s)")
    if usage is None:
        return head + "\n  (no per-worker numbers: the scheduler did not answer)"
    workers = list(usage.get("workers", ()))
    retried, lost = usage.get("retried", 0), sum(bool(w.get("lost")) for w in workers)
    if retried or lost:
        head += f"; {retried} calls re-run after {lost} worker(s) were lost"
    lines = [head, _row("worker", "threads", "calls", "busy s", "busy")]
    lines += _worker_rows(workers)
    busy = sum(w["busy"] for w in workers)
    capacity = sum(w["present"] * w["threads"] for w in workers)
    everyone = f"all {len(workers)} worker{'s' if len(workers) != 1 else ''}"
    lines.append(_row(everyone, sum(w["threads"] for w in workers),
                      sum(w["calls"] for w in workers), f"{busy:.1f}", _share(busy, capacity)))
    for asked, used in sorted((usage.get("needs") or {}).items()):
        lines.append(_row(f"calls asking {asked}", "", used["calls"],
                          f"{used['busy']:.1f}", "").rstrip())
    return "\n".join(lines)
