"""The executor's ``initializer``, run by a worker plug-in on every worker (see
:mod:`hpcfutures._remote.initializer` for what runs there).

::

    client ── register_plugin(InitializerPlugin) ──> scheduler ──> every worker present
               (the client waits for their set-up)      keeps it for workers that join later
    worker: setup() runs the initializer in the thread that runs its calls,
            before its first call; if it raised, an event on INITIALIZER_TOPIC
    client: hears the event (or asks, for the workers present) -> failed(exc, worker)

A worker that joins later runs ``setup`` before it reads the scheduler's first
instruction, so no call of the executor runs there before the initializer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from distributed import Client, Worker
from distributed.diagnostics.plugin import WorkerPlugin

from .._remote.initializer import failure_report, restore_failure, run_initializer

__all__ = ["INITIALIZER_TOPIC", "InitializerPlugin", "register_initializer"]

#: Event topic on which a worker whose initializer raised tells the client.
INITIALIZER_TOPIC = "hpcfutures-initializer"


class InitializerPlugin(WorkerPlugin):
    """Runs the pickled ``(initializer, initargs)`` once when a worker takes it on."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    async def setup(self, worker: Worker) -> None:
        # In the thread that runs the calls (the only one with one thread per
        # worker): state an initializer keeps per thread, such as a sqlite3
        # connection, is then usable by the calls.  The event loop stays free.
        threads = worker.executors["default"]
        report = await asyncio.get_running_loop().run_in_executor(
            threads, run_initializer, self.payload)
        if report is not None:
            # (Dask's scheduler sets "worker" to the worker's address.)
            worker.log_event(INITIALIZER_TOPIC, {"failure": report, "name": str(worker.name)})


async def register_initializer(client: Client, payload: bytes,
                               failed: Callable[[BaseException, str], None]) -> None:
    """Have every worker, present or future, run the initializer before its first call.

    Returns once the workers present have run it.  ``failed(exception,
    worker)`` is called (on the loop) for a worker whose initializer raised:
    now for those present, and as it happens for those that join later.
    """
    def heard(event: tuple[float, dict[str, Any]]) -> None:
        failed(restore_failure(event[1]["failure"]), event[1]["name"])

    client.subscribe_topic(INITIALIZER_TOPIC, heard)
    await client.register_plugin(InitializerPlugin(payload),
                                 name=f"hpcfutures-initializer-{client.id}")
    # The events of the workers present may come after this answer: ask them
    # (a worker leaving meanwhile answers with an error: it runs no call).
    reports: dict[str, Any] = await client.run(failure_report, on_error="return")
    for address, report in sorted(reports.items()):
        if isinstance(report, bytes):
            failed(restore_failure(report), address)
            return
