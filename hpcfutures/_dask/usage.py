"""The end-of-run summary's scheduler side: what each worker did, in plain data.

The client installs a :class:`UsageLedger` on the scheduler (only when
``summary`` is on) and, at the end, asks for its :class:`UsageReport`, which
:func:`hpcfutures._reports.summary.format_summary` turns into the table.  The
ledger reads what only the scheduler knows: each finished task's compute
time (the ``startstops`` Dask passes to the transition hook) and whether the
task was running on a worker that died (the task's ``suspicious`` count).
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

from distributed import Client, Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.scheduler import TaskState

from .._reports.summary import CALLS_ANNOTATION
from .._support.needs import GPUS, Needs

__all__ = ["UsageLedger", "UsageReport", "WorkerUsage", "report_and_remove", "start_usage",
           "usage_report"]


class WorkerUsage(TypedDict):
    """One worker's line of the summary."""

    name: str
    host: str
    threads: int
    #: The GPUs it owns (a worker resource: see ``_support/needs.py``).
    gpus: int
    #: Wall-clock (``time.time()``) seconds: when it joined and, if it did, left.
    joined: float
    left: float | None
    #: User calls it ran, and the seconds they computed.
    calls: int
    #: Of those, the calls that stated needs (hpcfutures.task, mpi_task with needs).
    needing: int
    busy: float
    #: Seconds from ``joined`` until it left or the report was made.
    present: float
    lost: bool


class NeedsUsage(TypedDict):
    """What the calls that stated the same needs (say ``gpus=1``) took, summed."""

    calls: int
    busy: float


class UsageReport(TypedDict):
    """The ledger's report: one entry per worker, the calls re-run after a loss, and
    the calls that stated needs by what they asked (``"gpus=1"``, ``"cores=4"``)."""

    workers: list[WorkerUsage]
    retried: int
    needs: dict[str, NeedsUsage]


class UsageLedger(SchedulerPlugin):
    """Scheduler plug-in: what each worker did while the client was connected.

    Each worker's *busy* time is the compute time of the tasks it finished; its
    *presence* runs from when the ledger started (or the worker joined) until
    it left or the report was made, so busy / (presence x threads) is how well
    it was used.
    """

    def __init__(self) -> None:
        self.workers: dict[str, WorkerUsage] = {}
        self.retried = 0
        self.needs: dict[str, NeedsUsage] = {}
        self._scheduler: Scheduler | None = None

    async def start(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        for address in list(scheduler.workers):
            self.add_worker(scheduler, address)

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        state = scheduler.workers.get(worker)
        if state is None:
            return
        self.workers[worker] = WorkerUsage(
            name=str(state.name), host=state.host, threads=state.nthreads,
            gpus=int((getattr(state, "resources", None) or {}).get(GPUS, 0)),
            joined=time.time(), left=None, calls=0, needing=0, busy=0.0, present=0.0,
            lost=False)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        entry = self.workers.get(worker)
        if entry is not None and entry["left"] is None:
            entry["left"] = time.time()

    def transition(self, key: Any, start: str, finish: str, *args: Any,
                   **kwargs: Any) -> None:
        if start != "processing" or finish not in ("memory", "erred"):
            return
        worker = kwargs.get("worker")
        entry = self.workers.get(worker) if isinstance(worker, str) else None
        if entry is None:
            return
        task = self._scheduler.tasks.get(key) if self._scheduler is not None else None
        calls = _calls_of(task)
        busy = sum(part["stop"] - part["start"] for part in kwargs.get("startstops") or ()
                   if part["action"] == "compute")
        entry["calls"] += calls
        entry["busy"] += busy
        restrictions = getattr(task, "resource_restrictions", None)
        if restrictions:
            entry["needing"] += calls
            asked = self.needs.setdefault(str(Needs.from_resources(restrictions)),
                                          NeedsUsage(calls=0, busy=0.0))
            asked["calls"] += calls
            asked["busy"] += busy
        if task is not None and task.suspicious:
            self.retried += calls  # it was running on a worker that died

    def report(self) -> UsageReport:
        """Plain data for the client: one entry per worker, and the re-run calls."""
        now = time.time()
        workers: list[WorkerUsage] = []
        for entry in self.workers.values():
            end = entry["left"] if entry["left"] is not None else now
            row: WorkerUsage = {**entry, "present": max(end - entry["joined"], 0.0),
                                "lost": entry["left"] is not None}
            workers.append(row)
        return UsageReport(workers=workers, retried=self.retried, needs=dict(self.needs))


def report_and_remove(name: str, dask_scheduler: Scheduler) -> UsageReport | None:
    """Run on the scheduler: the ledger ``name``'s report, and the ledger removed
    (each client counts only its own work); None if there is no such ledger."""
    ledger = dask_scheduler.plugins.get(name)
    if not isinstance(ledger, UsageLedger):
        return None
    dask_scheduler.remove_plugin(name=name)
    return ledger.report()


async def start_usage(client: Client) -> str:
    """Start counting this client's work on the scheduler; return the ledger's name.

    The client installs the ledger itself (only when ``summary`` is on), so the
    scheduler pays nothing otherwise, and each client gets a ledger of its own.
    """
    name = f"hpcfutures-usage-{client.id}"
    await client.register_plugin(UsageLedger(), name=name)
    return name


async def usage_report(client: Client, name: str) -> UsageReport | None:
    """The ledger's report (and the ledger removed), None if it is gone."""
    report: UsageReport | None = await client.run_on_scheduler(report_and_remove, name)
    return report


def _calls_of(task: TaskState | None) -> int:
    """User calls a task carries: 1 unless the client annotated it otherwise."""
    if task is None:
        return 1
    calls = (task.annotations or {}).get(CALLS_ANNOTATION, 1)
    return int(calls)
