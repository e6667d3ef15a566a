"""What the client asks about the cluster: its workers, their threads and memory.

The rest of hpcfutures (the bridge, the roster, the capacity query, the
dashboard line) calls these typed functions instead of reading Dask's replies
itself; every name Dask gives a reply's field, or an RPC, is spelled here
only, and ``tests/test_dask_seams.py`` pins each against a real scheduler.
All run on the client's loop thread, except :func:`dashboard_facts_here`,
which runs on the scheduler.
"""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Callable
from typing import Any, NamedTuple, TypedDict, TypeVar

from distributed import Client, Scheduler

from ._common import (
    CLUSTER_SIZE_OP,
    CLUSTER_TOPIC,
    RELEASED_OP,
    WORKER_CHANGES_OP,
    dashboard_cannot_stop,
    scheduler_rpc,
)

__all__ = [
    "DashboardFacts",
    "WorkerChanges",
    "WorkerFacts",
    "WorkerPlace",
    "ask_workers",
    "cluster_size",
    "dashboard_facts",
    "dashboard_facts_here",
    "released_workers",
    "total_threads",
    "worker_changes",
    "worker_facts",
    "worker_names",
    "worker_resources",
]

T = TypeVar("T")


class WorkerFacts(NamedTuple):
    """One worker as the scheduler describes it.

    Attributes:
        name: The worker's Dask name (``rank-N`` inside a launch).
        threads: Tasks it runs at once.
        memory_limit: Its Dask memory limit in bytes; None if it has none.
    """

    name: str
    threads: int
    memory_limit: int | None


class WorkerPlace(NamedTuple):
    """Who a worker is and where it runs.

    Attributes:
        name: The worker's Dask name (``rank-N`` inside a launch).
        host: Its host's name, as the worker gave it, else the host of its address;
            None if the scheduler said neither.
    """

    name: str
    host: str | None


class DashboardFacts(TypedDict):
    """Where the scheduler's HTTP server listens (port 0: it has none), and whether it
    serves the dashboard."""

    host: str
    address: str
    port: int
    served: bool
    bokeh: bool
    #: Why the scheduler left its dashboard off although asked ("" when it did not).
    cannot_stop: str


async def cluster_size(client: Client, subscribe: bool = False) -> tuple[int, int]:
    """(workers, threads) connected right now, asked of the scheduler.

    Two numbers, where Dask's ``ncores`` answers with every worker's: the
    client asks twice a second while calls are outstanding.  ``subscribe``:
    the scheduler also subscribes this client to the cluster's announcements,
    before it counts.  Dask's own subscription travels on the client's batched
    stream, which this question overtakes: a worker that joined in between
    would be neither counted nor announced.
    """
    ask = getattr(scheduler_rpc(client), CLUSTER_SIZE_OP)
    workers, threads = await (ask(subscribe=client.id) if subscribe else ask())
    return int(workers), int(threads)


class WorkerChanges:
    """On the scheduler: every join and departure, numbered, for the client's roster.

    The client names a worker that left ("rank 37 (worker) on node12").  Asking
    for every worker's description (Dask's ``identity``: about 660 bytes a
    worker, 6.6 MB at 10,000) twice a second whenever the count changes would
    cost O(workers) a question, all through a launch's start.  So it asks for
    what changed since its last question: O(changes), whatever the size.
    """

    def __init__(self) -> None:
        #: ("+", address, name, host) or ("-", address, "", None), in order.
        self.events: list[tuple[str, str, str, str | None]] = []

    def install(self, scheduler: Scheduler) -> None:
        scheduler.handlers[WORKER_CHANGES_OP] = self.since
        def size(subscribe: str | None = None) -> tuple[int, int]:
            if subscribe is not None:  # see cluster_size
                scheduler.subscribe_topic(CLUSTER_TOPIC, subscribe)
            return len(scheduler.workers), int(scheduler.total_nthreads)

        scheduler.handlers[CLUSTER_SIZE_OP] = size

    def joined(self, scheduler: Scheduler, address: str) -> None:
        state = scheduler.workers.get(address)
        if state is None:
            return
        host = state.host  # an address, until the worker names its host (described)
        self.events.append(("+", address, str(state.name), str(host) if host else None))

    def described(self, address: str, name: str, host: str) -> None:
        """The worker at ``address`` told its name and host name (after its join):
        the client's roster takes the later word."""
        self.events.append(("+", address, name, host))

    def left(self, address: str) -> None:
        self.events.append(("-", address, "", None))

    def since(self, start: int = 0) -> dict[str, Any]:
        return {"next": len(self.events), "events": self.events[start:]}


async def worker_changes(client: Client, since: int
                         ) -> tuple[int, list[tuple[str, str, WorkerPlace | None]]]:
    """The joins and departures after the ``since``-th: the next number to ask from,
    and ``("+", address, place)`` or ``("-", address, None)`` for each."""
    answer: dict[str, Any] = await getattr(scheduler_rpc(client), WORKER_CHANGES_OP)(
        start=since)
    changes: list[tuple[str, str, WorkerPlace | None]] = [
        (kind, address, WorkerPlace(name, host) if kind == "+" else None)
        for kind, address, name, host in answer["events"]]
    return int(answer["next"]), changes


async def total_threads(client: Client) -> int:
    """Worker threads as of the client's last scheduler info (at least 1).

    Read on the client's own loop: an asynchronous client answers from its
    cache, without a round trip.
    """
    return int(client.scheduler_info().get("total_threads") or 1)


async def _workers_identity(client: Client) -> dict[str, dict[str, Any]]:
    """The scheduler's description of every connected worker, by address."""
    identity: dict[str, Any] = await scheduler_rpc(client).identity(n_workers=-1)
    workers: dict[str, dict[str, Any]] = identity["workers"]
    return workers


async def worker_facts(client: Client) -> dict[str, WorkerFacts]:
    """Every connected worker's name, threads and memory limit, by address."""
    return {address: WorkerFacts(str(info["name"]), int(info["nthreads"]),
                                 int(info["memory_limit"] or 0) or None)
            for address, info in (await _workers_identity(client)).items()}


async def worker_resources(client: Client) -> dict[str, dict[str, float]]:
    """Every connected worker's resources (cores, GPUs, memory: see
    ``_support/needs.py``), by address."""
    return {address: dict(info.get("resources") or {})
            for address, info in (await _workers_identity(client)).items()}


async def worker_names(client: Client) -> dict[str, str]:
    """Every connected worker's name, by address."""
    return {address: str(info["name"])
            for address, info in (await _workers_identity(client)).items()}


async def released_workers(client: Client) -> set[str]:
    """Names of the workers the scheduler retired as idle (see :mod:`.release`)."""
    names: list[str] = await getattr(scheduler_rpc(client), RELEASED_OP)()
    return set(names)


async def ask_workers(client: Client, fn: Callable[[], T],
                      workers: list[str]) -> dict[str, T | BaseException]:
    """``fn()`` run on each of ``workers``: its result, or the exception it raised."""
    answers: dict[str, T | BaseException] = await client.run(
        fn, workers=workers, on_error="return")
    return answers


def dashboard_facts_here(dask_scheduler: Scheduler) -> DashboardFacts:
    """Run on the scheduler: its host name, where its HTTP server is bound,
    whether that serves the dashboard, and whether bokeh is importable there."""
    # Without the dashboard there is no HTTP server (see scheduler._Scheduler);
    # with it, Dask notes on tornado's server where it bound it.
    server: Any = getattr(dask_scheduler, "http_server", None)  # tornado's HTTPServer
    bokeh = importlib.util.find_spec("bokeh") is not None
    if server is None:
        return DashboardFacts(host=socket.gethostname(), address="", port=0, served=False,
                              bokeh=bokeh, cannot_stop=dashboard_cannot_stop())
    return DashboardFacts(
        host=socket.gethostname(),
        address=str(server.address),
        port=int(server.port),
        served=bool(dask_scheduler.http_application.applications),
        bokeh=bokeh,
        cannot_stop="",
    )


async def dashboard_facts(client: Client) -> DashboardFacts:
    """Where the scheduler's dashboard listens, asked of the scheduler (which may
    be another rank on another host)."""
    facts: DashboardFacts = await client.run_on_scheduler(dashboard_facts_here)
    return facts
