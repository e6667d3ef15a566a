"""The client's side: connect, follow the cluster, ask the scheduler, say goodbye."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import ipaddress
import logging
import socket
import ssl
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from distributed import Client, Security
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.core import CommClosedError, connect
from distributed.core import send_recv

from .._errors import LauncherError, VersionMismatchError
from .._support.environment import MISMATCH_MARK
from .._support.logs import dask_silenced
from .._support.waves import WaveLog
from . import tuning
from ._common import (
    AWAIT_WORKERS_OP,
    CLUSTER_TOPIC,
    FINISH_OP,
    STARTUP_FAILED_OP,
    STARTUP_TOPIC,
    _hurry,
    scheduler_rpc,
)
from .cluster import cluster_size

logger = logging.getLogger("hpcfutures")

__all__ = [
    "Knock", "connect_client", "finish_client", "follow_cluster", "knock", "listening",
    "on_scheduler_lost", "probe", "report_startup_failure", "request_stop",
    "wait_for_workers",
]


async def follow_cluster(client: Client,
                         changed: Callable[[int, int, Sequence[str]], None]) -> None:
    """Call ``changed(workers, threads, left)`` now and whenever workers join or leave
    (``left``: the addresses of those that left since the last call).

    The client's own scheduler info is refreshed only every two seconds, so a
    ``map`` started just after the launch would size its chunks for the
    workers present at start-up (typically one of many).
    """
    heard = False

    def announced(event: tuple[float, dict[str, Any]]) -> None:
        nonlocal heard
        heard = True
        changed(event[1]["workers"], event[1]["threads"], event[1].get("left", ()))

    client.subscribe_topic(CLUSTER_TOPIC, announced)  # the handler; the scheduler's side:
    now = await cluster_size(client, subscribe=True)
    if not heard:  # else an announcement newer than this answer came first
        changed(*now, ())


class Knock(enum.Enum):
    """What came back from an address: a Dask server, a refusal, or nothing in time."""

    ANSWERED = "answered"
    #: Nobody listens there (the connection was refused, or no route): definite.
    REFUSED = "refused"
    #: No answer before the deadline, or a failure that may pass.
    SILENT = "silent"


async def probe(address: str, timeout: float, security: Security | None = None) -> bool:
    """Whether anything answers at ``address`` (tells a live scheduler from a stale file)."""
    return await knock(address, timeout, security) is Knock.ANSWERED


async def knock(address: str, timeout: float, security: Security | None = None) -> Knock:
    """Who answers at ``address``; see :class:`Knock`.

    Over TCP (``tcp://``, ``tls://``) a connection of its own: a port where
    nobody listens refuses it at once, where Dask's ``connect`` would retry it
    until ``timeout`` (a rank that starts just after the end of a launch would
    spend that long finding out that the scheduler is gone); over ``tls://``
    the TLS handshake with the launch's credentials follows, which only a
    server holding the launch's certificate completes.  Dask's own handshake
    is not awaited.  Other failures are tried again until ``timeout``, as Dask
    does.  Any other scheme: Dask's ``connect``, bounded as a whole.
    """
    scheme = parse_address(address)[0]
    args = security.get_connection_args("client") if security is not None else {}
    if scheme in _OVER_TCP:
        context = args.get("ssl_context") if scheme == "tls" else None
        if scheme == "tls" and context is None:
            return Knock.SILENT  # no credentials: nothing could complete the handshake
        return await _connect(address, timeout, context, again=True)
    try:  # Dask's connect bounds the connection, not the handshake after it: this does
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
    except (OSError, asyncio.TimeoutError):
        return Knock.SILENT
    await comm.close()
    return Knock.ANSWERED


#: The schemes whose addresses a connection of hpcfutures' own can try.
_OVER_TCP = ("tcp", "tls")


async def listening(address: str, timeout: float) -> Knock:
    """Whether anything listens at ``address``: a TCP connection only, no TLS.

    What a joining worker asks now and then: has the scheduler gone (refused)?
    The kernel answers it even while the scheduler's event loop is busy, and
    the scheduler pays an accept and a failed handshake (~0.1 ms) instead of a
    TLS handshake (~2 ms): a large launch's pending joins would otherwise keep
    it busy with their own checks.  It cannot tell a live scheduler from
    another program on a reused port: :func:`knock` is for that (a probe).
    """
    return await _connect(address, timeout, None, again=False)


async def _connect(address: str, timeout: float, context: ssl.SSLContext | None, *,
                   again: bool) -> Knock:
    """One connection to ``address`` (TLS with ``context``), closed at once; with
    ``again``, failures other than a refusal or the deadline are tried again."""
    host, port = parse_host_port(parse_address(address)[1])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = 0.05
    while True:
        try:
            return await asyncio.wait_for(_connect_once(host, port, context), timeout)
        except asyncio.TimeoutError:
            return Knock.SILENT
        except OSError as err:
            if _refused(err):
                return Knock.REFUSED
            if not again or loop.time() + pause >= deadline:
                return Knock.SILENT
        await asyncio.sleep(pause)
        pause *= 2
        timeout = deadline - loop.time()


async def _connect_once(host: str, port: int, context: ssl.SSLContext | None) -> Knock:
    """Connect to each address of ``host`` in turn until one takes the connection
    (asyncio would fold several refusals into one OSError without an errno)."""
    try:
        places = [str(ipaddress.ip_address(host))]  # the usual case: no look-up to make
    except ValueError:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        places = [str(place[0]) for *_, place in found]
    refusal: OSError | None = None
    for place in places:
        try:
            _reader, writer = await asyncio.open_connection(place, port, ssl=context)
        except OSError as err:
            if not _refused(err):
                raise
            refusal = err
            continue
        if context is not None:
            writer.transport.abort()  # no TLS close handshake, which a busy peer could stall
        else:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return Knock.ANSWERED
    raise refusal if refusal is not None else ConnectionRefusedError(errno.ECONNREFUSED, host)


def _refused(err: BaseException) -> bool:
    """Whether ``err`` says that nobody listens there: refused, or no route to the host."""
    return isinstance(err, OSError) and err.errno in _NOBODY_THERE


#: Connection errors that mean nobody can answer at the address.
_NOBODY_THERE = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH}


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


async def connect_client(address: str, timeout: float, security: Security | None = None,
                         connections: int = 512, direct: bool = True) -> Client:
    """An asynchronous Dask client, registered with the coordinator as *the* client,
    keeping up to ``connections`` connections to workers open (limits.client_connections).

    ``direct``: results come straight from the worker that holds them, not
    through the scheduler (a 40 MiB result crosses the network once); False
    for a client that reaches only the scheduler (through an SSH forward)."""
    # A large argument travels inside its call, as with any executor; Dask's
    # advice to scatter it or load it with Dask is not the user's to act on.
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning,
                            module="distributed.client")
    tuning.apply()
    client: Client = await Client(
        address,
        asynchronous=True,
        timeout=timeout,
        set_as_default=False,
        security=security,
        direct_to_workers=direct,
        connection_limit=connections,
    )
    await scheduler_rpc(client).hpcfutures_register(client=client.id)
    _hurry(client.scheduler_comm)
    _follow_startup_failures(client)
    return client


def on_scheduler_lost(client: Client, lost: Callable[[], None]) -> None:
    """Call ``lost()`` on the client's loop as soon as its connection to the scheduler
    drops, before Dask tries to reconnect (for as long as its timeout).

    Dask then cancels only the futures it holds.  A call without one (held for a
    bundle) or one submitted while Dask reconnects (its message waits for a
    connection that never comes) hears of the loss only here.  Dask's
    ``Client._reconnect`` is private: ``tests/test_dask_seams.py`` pins it.
    """
    reconnect = client._reconnect

    async def reconnect_after_saying_so() -> Any:
        lost()
        return await reconnect()

    client._reconnect = reconnect_after_saying_so  # type: ignore[method-assign]


async def wait_for_workers(client: Client, timeout: float) -> None:
    """Wait until at least one worker has joined, at most ``timeout`` s.

    Raises :class:`~hpcfutures.LauncherError` as soon as the scheduler knows
    that none will come (the workers failed to start: it says why; a
    :class:`~hpcfutures.VersionMismatchError` when they run other versions than
    the scheduler), and :class:`TimeoutError` when the deadline passes.
    """
    answer: dict[str, Any] = await asyncio.wait_for(
        getattr(scheduler_rpc(client), AWAIT_WORKERS_OP)(timeout=timeout), timeout + 5)
    if answer.get("failed"):
        _WARNED.setdefault(client, set()).update(answer.get("failures", []))
        failed = str(answer["failed"])
        error = VersionMismatchError if MISMATCH_MARK in failed else LauncherError
        raise error(f"no worker could start, so the launch ends: {failed}. Its output "
                    "has the whole error")
    _warn_of_startup_failures(client, answer.get("failures", []))
    if not answer.get("workers"):
        raise TimeoutError(f"no worker joined within {timeout:g} s")


async def report_startup_failure(address: str, who: str, why: str, timeout: float,
                                 security: Security | None = None) -> bool:
    """From a worker that could not start: tell the scheduler at ``address`` why.

    Best effort, within ``timeout`` s: whether the scheduler took the news.  A
    scheduler that has gone (the reason this worker could not join) costs nothing."""
    if await knock(address, timeout, security) is not Knock.ANSWERED:
        return False
    args = security.get_connection_args("client") if security is not None else {}
    try:
        comm = await connect(address, timeout=timeout, **args)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        reply: object = await asyncio.wait_for(
            send_recv(comm, op=STARTUP_FAILED_OP, who=who, why=why), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        with contextlib.suppress(Exception):
            await comm.close()
    return reply == "ok"


#: Per client: the start-up failures it has warned of (each is heard of twice at most:
#: as an event, and in the answer to its wait for the first worker).
_WARNED: weakref.WeakKeyDictionary[Client, set[str]] = weakref.WeakKeyDictionary()


_WAVES: weakref.WeakKeyDictionary[Client, WaveLog] = weakref.WeakKeyDictionary()


def _warn_of_startup_failures(client: Client, failures: list[str]) -> None:
    """On the client: say so when a worker failed to start while the others carry on.

    One line for one failure; when many workers fail together (a node without the
    environment, a site's limit), the first line and then one summary, counted by
    cause (WaveLog), not a line per worker."""

    warned = _WARNED.setdefault(client, set())
    wave = _WAVES.get(client)
    if wave is None:
        wave = _WAVES[client] = WaveLog(logger, "worker failed to start",
                                        "workers failed to start")
    for failure in failures:
        if failure not in warned:
            warned.add(failure)
            why = failure.partition(" failed to start: ")[2] or failure
            wave.add(f"{failure}; the launch goes on with the other workers",
                     why if len(why) <= 80 else why[:77] + "...")


def _follow_startup_failures(client: Client) -> None:
    """Hear of the failures that happen after the client's wait for its first worker
    (those before are in the answer to that wait)."""
    def heard(event: tuple[float, dict[str, Any]]) -> None:
        if not event[1].get("fatal"):
            _warn_of_startup_failures(client, [event[1]["failure"]])

    client.subscribe_topic(STARTUP_TOPIC, heard)


async def finish_client(client: Client, status: int, timeout: float = 5.0, *,
                        fast: bool = False) -> None:
    """Tell the scheduler the launch is over, then close the client.

    The goodbye travels on the client's own stream to the scheduler, just ahead
    of Dask's "close-client", which the scheduler handles after it: nothing is
    connected and nothing is awaited but the close itself.  (A goodbye sent as
    an RPC would open a connection: to a scheduler that has died, it would retry
    for the whole ask timeout; to one closing after a Ctrl-C, it would wait out
    its deadline.)  With the scheduler gone, there is nobody to
    tell: Dask's complaints about the lost connection stay out of the output.

    ``fast``: the scheduler is closing too (the whole launch was signalled), so
    nothing more will come from it: Dask's close does not wait (up to 2 s) for
    the scheduler to confirm that the stream closed.
    """
    # distributed.utils_comm: gathers still in flight when the client closes fail with
    # "ConnectionPool is closed", a traceback each (many after a large map):
    # nobody waits for those results any more.
    with dask_silenced("distributed.client", "distributed.comm", "distributed.core",
                   "distributed.utils_comm"):
        if client.status == "running":
            with contextlib.suppress(Exception):
                client._send_to_scheduler({"op": FINISH_OP, "status": int(status)})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client._close(fast=fast), timeout)
