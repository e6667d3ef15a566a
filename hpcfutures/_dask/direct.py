"""A lone call sent straight to a worker, and its outcome straight back.

Through the scheduler a call's round trip is four messages between processes
(client, scheduler, worker, scheduler, client) and the scheduler's work on
each: about 3 ms in the laptop default, against about 2 ms for Parsl's executor, whose
interchange relays in C.  When the executor has nothing else in flight there
is nothing for the scheduler to decide, so the client asks a worker to run
the call (one request on a connection it keeps) and the answer carries the
outcome: about 1 ms (benchmarks/README.md, "Round-trip latency").

The worker runs the call as Dask runs a task (``_run_task``: its thread
pool, the task's key in the thread's state, so that a death certificate
names it, and ``get_worker()`` works inside), under a key the scheduler never
hears of.  Everything else (deciding when a call may go this way, what
happens when the worker is lost) is the client's: ``_facade/core/direct.py``.

Data flow::

    client ── {"op": hpcfutures_direct, key, calls} ──> worker (one pooled connection)
    client <── {"status": "OK", "outcome": ...} ─────── worker ran ``run_direct``
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from distributed import Client, Worker
from distributed.comm.core import CommClosedError
from distributed.core import clean_exception, send_recv
from distributed.protocol.serialize import Serialized, serialize
from distributed.utils import run_in_executor_with_context
from distributed.worker import _run_task

from .._remote.calls import run_direct

__all__ = ["DIRECT_OP", "DirectLost", "DirectRefused", "call_direct", "pack_calls",
           "serve_direct_calls"]

logger = logging.getLogger("hpcfutures")

#: The worker's handler for a call sent to it directly.
DIRECT_OP = "hpcfutures_direct"
#: Seconds to connect to the worker (a pooled connection is there at once).  A worker
#: that died before the client heard of it refuses, and Dask's connect retries a
#: refused port until its timeout: the call then goes the usual way after this long.
CONNECT_TIMEOUT = 3.0


class DirectRefused(Exception):
    """The worker did not take the call (it is closing or paused): send it the usual way."""


class DirectLost(Exception):
    """The connection to the worker broke before its answer: the worker is probably gone."""


def serve_direct_calls(worker: Worker, joined: Callable[[], bool]) -> None:
    """Let ``worker`` run the calls a client sends it directly, once ``joined()``.

    Dask's worker takes tasks once it has run the plug-ins the scheduler handed
    it as it joined (the executor's initializer among them); it listens, and
    says it runs, before that.  Until ``joined()`` a call is refused, and goes
    the usual way.
    """

    async def run(comm: Any = None, key: str = "", calls: Any = None) -> dict[str, Any]:
        if not joined() or worker.status.name != "running":  # closing, paused: refused
            return {"status": "refused"}
        # Dask's own task runner (see the module's docstring); its failure is the
        # runner's own (the initializer's failure), never the call's.
        from dask._task_spec import Task

        result = await run_in_executor_with_context(
            worker.executors["default"], _run_task, Task(key, run_direct, calls), {},
            worker.execution_state, key, worker.active_threads, worker.active_threads_lock,
            worker.scheduler_delay)
        if result["status"] != "OK":
            failure: Any = result  # a RunTaskFailure
            return {"status": "failed", "exception": failure["exception"],
                    "traceback": failure.get("traceback")}
        try:
            outcome = Serialized(*serialize(result["result"], on_error="raise"))
        except Exception as err:  # an unpicklable result: fails as Dask's fetch would
            return {"status": "unpicklable", "error": f"{type(err).__name__}: {err}"}
        return {"status": "OK", "outcome": outcome}

    worker.handlers[DIRECT_OP] = run


def pack_calls(calls: Any) -> Serialized:
    """The calls pickled now, on the client: one that cannot be raises here, so
    that it goes the usual way (and fails there with the usual error)."""
    return Serialized(*serialize(calls, on_error="raise"))


async def call_direct(client: Client, address: str, key: str, calls: Serialized) -> Any:
    """Run ``calls`` (packed) on the worker at ``address``; their outcome.

    Raises :class:`DirectRefused` (not run: the worker could not be reached
    within :data:`CONNECT_TIMEOUT`, or did not take it) or :class:`DirectLost`
    (the connection broke after the request: the worker went away, perhaps
    killed by a call); a runner's own failure raises as it would from a Dask task.
    """
    pool = client.rpc
    try:
        comm = await pool.connect(address, timeout=CONNECT_TIMEOUT)
    except (OSError, RuntimeError) as err:  # gone, unreachable, or the client is closing
        raise DirectRefused(f"could not reach worker {address}: {err}") from err
    try:
        answer = await send_recv(comm=comm, op=DIRECT_OP, key=key, calls=calls)
    except (CommClosedError, OSError) as err:
        raise DirectLost(f"the connection to worker {address} broke: {err}") from err
    finally:
        pool.reuse(address, comm)
    status = answer.get("status")
    if status == "OK":
        return answer["outcome"]
    if status == "failed":
        _type, exception, traceback = clean_exception(answer["exception"], answer["traceback"])
        if exception is None:
            raise RuntimeError(f"worker {address} failed to run a call, without saying why")
        raise exception.with_traceback(traceback)
    if status == "unpicklable":
        raise TypeError(f"Could not serialize the result: {answer['error']}")
    raise DirectRefused(f"worker {address} did not take the call ({status})")
