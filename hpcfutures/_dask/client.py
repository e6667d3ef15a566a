"""The client's side: connect, follow the cluster, ask the scheduler, say goodbye."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Awaitable, Callable
from typing import cast

from distributed import Client, Security
from distributed.comm.core import CommClosedError, connect
from distributed.core import send_recv

from ._common import CLUSTER_TOPIC, _hurry, _silenced, scheduler_rpc
from .cluster import cluster_size

__all__ = [
    "connect_client", "finish_client", "follow_cluster", "probe", "request_stop",
    "wait_for_workers",
]


async def follow_cluster(client: Client, changed: Callable[[int, int], None]) -> None:
    """Call ``changed(workers, threads)`` now and whenever a worker joins or leaves.

    The client's own scheduler info is refreshed only every two seconds, so a
    ``map`` started just after the launch would size its chunks for the
    workers present at start-up (typically one of many).
    """
    def announced(event: tuple[float, dict[str, int]]) -> None:
        changed(event[1]["workers"], event[1]["threads"])

    client.subscribe_topic(CLUSTER_TOPIC, announced)
    changed(*await cluster_size(client))


async def probe(address: str, timeout: float, security: Security | None = None) -> bool:
    """Whether anything answers at ``address`` (tells a live scheduler from a stale file)."""
    args = security.get_connection_args("client") if security is not None else {}
    try:
        comm = await connect(address, timeout=timeout, **args)
    except (OSError, asyncio.TimeoutError):
        return False
    await comm.close()
    return True


async def request_stop(address: str, timeout: float, security: Security | None = None,
                       reason: str = "") -> bool:
    """Ask a serving launch's scheduler to end the launch; whether it accepted.

    The scheduler may close the connection before its answer arrives (it is
    stopping); that counts as accepted, and the caller confirms the stop
    through the scheduler file.
    """
    args = security.get_connection_args("client") if security is not None else {}
    comm = await connect(address, timeout=timeout, **args)
    try:
        reply: object = await asyncio.wait_for(
            send_recv(comm, op="hpcfutures_stop", reason=reason), timeout)
    except CommClosedError:
        return True
    finally:
        with contextlib.suppress(Exception):
            await comm.close()
    return reply == "ok"


async def connect_client(address: str, timeout: float,
                         security: Security | None = None) -> Client:
    """An asynchronous Dask client, registered with the coordinator as *the* client."""
    # A large argument travels inside its call, as with any executor; Dask's
    # advice to scatter it or load it with Dask is not the user's to act on.
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning,
                            module="distributed.client")
    client: Client = await Client(
        address,
        asynchronous=True,
        timeout=timeout,
        set_as_default=False,
        security=security,
        # Results come straight from the worker that holds them, not
        # through the scheduler (a 40 MiB result crosses the network once).
        direct_to_workers=True,
    )
    await scheduler_rpc(client).hpcfutures_register(client=client.id)
    _hurry(client.scheduler_comm)
    return client


async def wait_for_workers(client: Client, timeout: float) -> None:
    """Wait until at least one worker has joined, at most ``timeout`` s."""
    # An asynchronous client returns a coroutine, whatever Dask's annotation says.
    await cast(Awaitable[None], client.wait_for_workers(1, timeout=timeout))


async def finish_client(client: Client, status: int, timeout: float = 5.0) -> None:
    """Tell the scheduler the launch is over, then close the client.

    If the scheduler is already gone (it was signalled too, or died) there is
    nobody to tell: close at once instead of waiting for a reconnection, and
    keep Dask's complaints about the lost connection out of the user's output.
    """
    with _silenced("distributed.client", "distributed.comm", "distributed.core"):
        if client.status == "running":
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    scheduler_rpc(client).hpcfutures_finish(status=status), timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout)
