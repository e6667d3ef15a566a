"""The end-of-run summary: was the allocation well used?

Two sources, because neither alone knows everything::

    client  CallTally      user calls that came back, and how many raised
                           (exact: it sees every future and every map item)
    scheduler UsageLedger  per worker: busy seconds, calls, presence; calls
    (in _dask.py)          re-run after a lost worker

hpcfutures packs many user calls into one Dask task (map chunks, submit
bundles), so with ``summary`` on the client gives each task that carries other
than one call a Dask annotation, :data:`CALLS_ANNOTATION`, with the number
(``_facade/sending.py``); the ledger reads it from the task's state (see
:func:`calls_of`).  Nothing here runs unless ``summary`` is on.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CALLS_ANNOTATION", "CallTally", "UsageLedger", "calls_of", "format_summary",
           "report_and_remove"]

#: The Dask annotation that holds how many user calls a task carries (1 if absent).
CALLS_ANNOTATION = "hpcfutures_calls"
#: Workers listed one by one; more are summed up in one line.
MAX_ROWS = 16


def calls_of(task: Any) -> int:
    """User calls carried by a scheduler's task state (1 unless annotated otherwise)."""
    annotations = getattr(task, "annotations", None) or {}
    return annotations.get(CALLS_ANNOTATION, 1)


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


class UsageLedger:
    """Scheduler side: what each worker did while the client was connected.

    Written against the hooks of Dask's ``SchedulerPlugin`` (``_dask.py`` mixes
    it into one, so this module imports nothing from Dask).  Each worker's
    *busy* time is the compute time of the tasks it finished; its *presence*
    runs from when the ledger started (or the worker joined) until it left or
    the report was made, so busy / (presence x threads) is how well it was used.
    """

    def __init__(self) -> None:
        self.workers: dict[str, dict[str, Any]] = {}
        self.retried = 0
        self._scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        for address in list(scheduler.workers):
            self.add_worker(scheduler, address)

    def add_worker(self, scheduler: Any, worker: str) -> None:
        state = scheduler.workers.get(worker)
        if state is None:
            return
        self.workers[worker] = {"name": str(state.name), "host": state.host,
                                "threads": state.nthreads, "joined": time.time(),
                                "left": None, "calls": 0, "busy": 0.0}

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        entry = self.workers.get(worker)
        if entry is not None and entry["left"] is None:
            entry["left"] = time.time()

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if start != "processing" or finish not in ("memory", "erred"):
            return
        entry = self.workers.get(kwargs.get("worker"))
        if entry is None:
            return
        task = self._scheduler.tasks.get(key) if self._scheduler is not None else None
        calls = calls_of(task)
        entry["calls"] += calls
        entry["busy"] += sum(part["stop"] - part["start"]
                             for part in kwargs.get("startstops") or ()
                             if part.get("action") == "compute")
        if task is not None and getattr(task, "suspicious", 0):
            self.retried += calls  # it was running on a worker that died

    def report(self) -> dict[str, Any]:
        """Plain data for the client: one entry per worker, and the re-run calls."""
        now = time.time()
        workers = []
        for entry in self.workers.values():
            end = entry["left"] if entry["left"] is not None else now
            workers.append({**entry, "present": max(end - entry["joined"], 0.0),
                            "lost": entry["left"] is not None})
        return {"workers": workers, "retried": self.retried}


def report_and_remove(name: str, dask_scheduler: Any) -> dict[str, Any] | None:
    """Run on the scheduler: the ledger ``name``'s report, and the ledger removed
    (each client counts only its own work); None if there is no such ledger."""
    ledger = dask_scheduler.plugins.get(name)
    if ledger is None:
        return None
    dask_scheduler.remove_plugin(name=name)
    return ledger.report()


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
    label = f"all {len(workers)} worker{'s' if len(workers) != 1 else ''}"
    lines.append(_row(label, sum(w["threads"] for w in workers),
                      sum(w["calls"] for w in workers), f"{busy:.1f}", _share(busy, capacity)))
    return "\n".join(lines)
