"""The client's side: connect, follow the cluster, ask the scheduler, say goodbye."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Callable
from typing import Any

from distributed import Client
from distributed.comm import CommClosedError, connect
from distributed.core import send_recv

from .._reports.dashboard import dashboard_facts_here
from .._reports.summary import report_and_remove
from ._common import CLUSTER_TOPIC, _hurry, _silenced
from .scheduler import UsagePlugin

__all__ = [
    "connect_client", "dashboard_facts", "finish_client", "follow_cluster", "probe",
    "request_stop", "start_usage", "usage_report", "wait_for_workers",
]


async def follow_cluster(client: Client, changed: Callable[[int, int], None]) -> None:
    """Call ``changed(workers, threads)`` now and whenever a worker joins or leaves.

    The client's own scheduler info is refreshed only every two seconds, so a
    ``map`` started just after the launch would size its chunks for the
    workers present at start-up (typically one of many).
    """
    client.subscribe_topic(CLUSTER_TOPIC, lambda event: changed(**event[1]))
    cores = await client.scheduler.ncores()
    changed(workers=len(cores), threads=sum(cores.values()))


async def probe(address: str, timeout: float, security: Any = None) -> bool:
    """Whether anything answers at ``address`` (tells a live scheduler from a stale file)."""
    args = security.get_connection_args("client") if security is not None else {}
    try:
        comm = await connect(address, timeout=timeout, **args)
    except (OSError, asyncio.TimeoutError):
        return False
    await comm.close()
    return True


async def request_stop(address: str, timeout: float, security: Any = None,
                       reason: str = "") -> bool:
    """Ask a serving launch's scheduler to end the launch; whether it accepted.

    The scheduler may close the connection before its answer arrives (it is
    stopping); that counts as accepted, and the caller confirms the stop
    through the scheduler file.
    """
    args = security.get_connection_args("client") if security is not None else {}
    comm = await connect(address, timeout=timeout, **args)
    try:
        reply = await asyncio.wait_for(
            send_recv(comm, op="hpcfutures_stop", reason=reason), timeout)
    except CommClosedError:
        return True
    finally:
        with contextlib.suppress(Exception):
            await comm.close()
    return reply == "ok"


async def connect_client(address: str, timeout: float, security: Any = None) -> Client:
    """An asynchronous Dask client, registered with the coordinator as *the* client."""
    # A large argument travels inside its call, as with any executor; Dask's
    # advice to scatter it or load it with Dask is not the user's to act on.
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning,
                            module="distributed.client")
    client = await Client(
        address,
        asynchronous=True,
        timeout=timeout,
        set_as_default=False,
        security=security,
        # Results come straight from the worker that holds them, not
        # through the scheduler (a 40 MiB result crosses the network once).
        direct_to_workers=True,
    )
    await client.scheduler.hpcfutures_register(client=client.id)
    _hurry(client.scheduler_comm)
    return client


async def wait_for_workers(client: Client, timeout: float) -> None:
    """Wait until at least one worker has joined, at most ``timeout`` s."""
    await client.wait_for_workers(1, timeout=timeout)


async def start_usage(client: Client) -> str:
    """Start counting this client's work on the scheduler; return the ledger's name.

    The client installs the ledger itself (only when ``summary`` is on), so the
    scheduler pays nothing otherwise, and each client gets a ledger of its own.
    """
    name = f"hpcfutures-usage-{client.id}"
    await client.register_plugin(UsagePlugin(), name=name)
    return name


async def usage_report(client: Client, name: str) -> dict[str, Any] | None:
    """The ledger's report (and the ledger removed), None if it is gone."""
    return await client.run_on_scheduler(report_and_remove, name)


async def dashboard_facts(client: Client) -> dict[str, Any]:
    """Where the scheduler's dashboard listens, asked of the scheduler (which may
    be another rank on another host); see :func:`._dashboard.dashboard_facts_here`."""
    return await client.run_on_scheduler(dashboard_facts_here)


async def finish_client(client: Client, status: int, timeout: float = 5.0) -> None:
    """Tell the scheduler the launch is over, then close the client.

    If the scheduler is already gone (it was signalled too, or died) there is
    nobody to tell: close at once instead of waiting for a reconnection, and
    keep Dask's complaints about the lost connection out of the user's output.
    """
    with _silenced("distributed.client", "distributed.comm", "distributed.core"):
        if client.status == "running":
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.scheduler.hpcfutures_finish(status=status), timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout)
