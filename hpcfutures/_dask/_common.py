"""What every role's Dask code shares: message names, timings, TLS settings."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from distributed import Client, Security
from distributed.batched import BatchedSend

logger = logging.getLogger("hpcfutures")

VERDICT_OP = "hpcfutures-verdict"
#: The client's goodbye, with its status, on its stream to the scheduler (client.py).
FINISH_OP = "hpcfutures-finish"
#: Event topic on which the scheduler announces the workers and threads present.
CLUSTER_TOPIC = "hpcfutures-cluster"
#: Asks the scheduler for the workers it retired as idle (see release.py).
RELEASED_OP = "hpcfutures_released"
#: A worker that failed to start tells the scheduler why (see coordinator.Coordinator).
STARTUP_FAILED_OP = "hpcfutures_startup_failed"
#: The client waits for the first worker, or for the reason there will be none.
AWAIT_WORKERS_OP = "hpcfutures_await_workers"
#: The client asks which workers joined and left since it last asked (cluster.py).
WORKER_CHANGES_OP = "hpcfutures_worker_changes"
#: The client asks how many workers and threads there are (cluster.py).
CLUSTER_SIZE_OP = "hpcfutures_cluster_size"
#: Event topic on which the scheduler passes such a failure on to the client.
STARTUP_TOPIC = "hpcfutures-startup"
#: Event topic on which a worker describes itself to the scheduler as it joins: its
#: name, its host name and, when its scratch directory was slow to create, the seconds
#: and the directory (``{"name", "host", "scratch"}``; Dask adds ``"worker"``).
WORKER_TOPIC = "hpcfutures-worker"
#: Where the dashboard listens when asked for without an address.
DASHBOARD_ADDRESS = "127.0.0.1:8787"
#: Exit status of the other ranks when the client failed or vanished.
EXIT_FAILED = 1
#: Seconds a worker may take to close before its rank leaves regardless.
CLOSE_TIMEOUT = 5.0
#: The same once the client's verdict has arrived (the launch is over; on an idle
#: machine a whole mpiexec launch returns within a second of its client's end).
VERDICT_CLOSE_TIMEOUT = 1.0
#: Seconds Dask's batched streams gather messages before sending.  Dask's
#: defaults (10 ms client->scheduler, 5 ms scheduler->worker) add ~10 ms to
#: every round trip; hpcfutures batches tasks itself, so it can send sooner.
STREAM_INTERVAL = 0.001


def _hurry(stream: BatchedSend | None) -> None:
    """Shorten a Dask BatchedSend's batching interval.

    Best effort (only latency is at stake): a stream that is gone, or a Dask
    whose BatchedSend no longer has ``interval``, is left alone, and
    ``tests/test_dask_seams.py`` says so loudly.
    """
    if stream is not None and hasattr(stream, "interval"):
        stream.interval = STREAM_INTERVAL


def scheduler_rpc(client: Client) -> Any:
    """The client's RPC handle on the scheduler: ``await scheduler_rpc(c).ncores()``."""
    if client.scheduler is None:
        raise RuntimeError("the Dask client is not connected to a scheduler")
    return client.scheduler


def make_security(credentials: Mapping[str, str] | None) -> Security | None:
    """Dask's TLS settings from a launch's credentials; None means plain TCP.

    One :class:`Security` per credentials in a process, and so one TLS context
    per role: see :class:`_OneContextPerRole`."""
    if not credentials:
        return None
    cert, key = credentials["cert"], credentials["key"]
    security = _SECURITIES.get((cert, key))
    if security is None:
        security = _SECURITIES[(cert, key)] = _OneContextPerRole(cert, key)
    return security


class _OneContextPerRole(Security):
    """Dask's Security, building each role's TLS context once, not per connection.

    Dask makes a fresh ``SSLContext`` (and writes the in-memory key and
    certificate to temporary files to load them) on every call of
    ``get_connection_args``; hpcfutures calls it for every probe, knock and
    report, and a process hosting many workers (the scale harness) for each
    of them: ~2 ms of CPU each time.  A context is safe to share among
    connections, and the credentials never change during a launch.
    """

    # No __slots__ of its own: Dask checks the keyword arguments against
    # ``self.__slots__``, which must stay Security's.

    def __init__(self, cert: str, key: str) -> None:
        # Dask's Security is untyped.
        super().__init__(  # type: ignore[no-untyped-call]
            require_encryption=True,
            tls_ca_file=cert,
            tls_client_cert=cert,
            tls_client_key=key,
            tls_scheduler_cert=cert,
            tls_scheduler_key=key,
            tls_worker_cert=cert,
            tls_worker_key=key,
        )
        self._credentials = (cert, key)
        self._contexts: dict[tuple[str, str], dict[str, Any]] = {}

    def get_connection_args(self, role: str) -> dict[str, Any]:
        return self._once(("connect", role), super().get_connection_args)

    def get_listen_args(self, role: str) -> dict[str, Any]:
        return self._once(("listen", role), super().get_listen_args)

    def _once(self, what: tuple[str, str], make: Any) -> dict[str, Any]:
        args = self._contexts.get(what)
        if args is None:
            args = self._contexts[what] = make(what[1])
        # A copy: a caller may add its own keys (Dask's connect does not, today).
        return dict(args)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        # Contexts do not pickle; the credentials rebuild them where needed.
        return (_OneContextPerRole, self._credentials)


#: The first release of distributed whose scheduler stops bokeh 3.10's server in a
#: way bokeh accepts (its ``ServerNode._stop_services``).
DASK_STOPS_BOKEH_310 = (2026, 8)

#: The process's Security for each launch's credentials (a process has one or two).
_SECURITIES: dict[tuple[str, str], Security] = {}


def dashboard_cannot_stop() -> str:
    """Why this process's Dask could not stop its dashboard's server, or "" if it can.

    bokeh 3.10 refuses a synchronous ``stop()`` inside a running event loop, and
    distributed before 2026.8.0 calls just that when its scheduler closes: the
    close raises half-way.  Such a scheduler starts without its dashboard, and
    the client's warning gives this text.  Decided by the two releases'
    numbers alone.
    """
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("bokeh") is None:
        return ""
    try:
        bokeh, dask = (tuple(int(part) for part in importlib.metadata.version(name).split(".")[:2])
                       for name in ("bokeh", "distributed"))
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return ""
    if bokeh < (3, 10) or dask >= DASK_STOPS_BOKEH_310:
        return ""
    import distributed

    return (f"distributed {distributed.__version__} cannot stop the dashboard of bokeh "
            f"{importlib.metadata.version('bokeh')} (its scheduler's close fails): "
            "pip install 'bokeh<3.10', or distributed>=2026.8.0")
