"""A Dask worker inside a rank's process, closed promptly when the launch ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import warnings
from collections.abc import Iterator
from typing import Any

from distributed import Security, Worker

from .._errors import ConfigurationError
from .._remote import deathwatch, express, memory
from .._remote.calls import location
from .._support.logs import quiet_for_shutdown
from .._support.needs import CORES, GPUS, MEMORY
from . import tuning
from ._common import (
    CLOSE_TIMEOUT,
    VERDICT_CLOSE_TIMEOUT,
    VERDICT_OP,
    WORKER_TOPIC,
    _hurry,
)
from .express import ExpressOutbox, bind_to_thread, running_task_key, send_express

__all__ = ["WorkerService", "declared_resources", "run_worker", "startup_error"]

logger = logging.getLogger("hpcfutures")


#: Bytes a worker's memory grows by as it joins (connections, threads): about 3 MiB;
#: four times that, so that a worker checked just below Dask's pause
#: threshold does not cross it once connected.
JOINING_GROWTH = 16 * 2**20
#: Seconds a worker that could not start, or its watcher once it died, spends telling
#: the scheduler why (unless the launch's size asks for longer).
REPORT_TIMEOUT = 5.0


class _Worker(Worker):
    """Dask's worker without its HTTP server.

    Dask starts one on every worker (health and metrics pages), on every
    interface when the worker listens on all of them, and it answers anyone
    who can reach it, without the launch's credentials.  hpcfutures uses none
    of it, and the dashboard is the scheduler's (it learns about the workers
    over their TLS connections), so a worker serves nothing over HTTP.
    """

    def start_http_server(self, routes: Any, dashboard_address: Any, default_port: int = 0,
                          ssl_options: Any = None) -> None:
        return


#: Dask's warning when a worker's scratch directory took over a second to create.
_SLOW_SCRATCH = re.compile(r"Creating scratch directories is taking a surprisingly long time\. "
                           r"\((\d+(?:\.\d+)?)s\)")


@contextlib.contextmanager
def _slow_scratch_said_once() -> Iterator[list[float]]:
    """Catch Dask's warning that the scratch directory was slow to create; yield its seconds.

    150 workers starting at once on one node queue on the directory's lock files,
    and dozens of ranks would then print the same long warning (which blames a
    network file system).  The worker tells the scheduler instead, which logs
    one line for them all.  Any other warning is shown as it would have been.
    """
    seconds: list[float] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield seconds
    for warning in caught:
        found = _SLOW_SCRATCH.search(str(warning.message))
        if found:
            seconds.append(float(found[1]))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno, source=warning.source)


class WorkerService:
    """A Dask worker in this process: :meth:`join` the scheduler, then :meth:`serve`."""

    def __init__(self, address: str, *, name: str, nthreads: int,
                 memory_limit: str | int | None, host: str | None,
                 interface: str | None, timeout: float, security: Security | None = None,
                 resources: dict[str, float] | None = None, watch: bool = False,
                 report_timeout: float = REPORT_TIMEOUT, gpus: int = 0,
                 workers_on_host: int = 1) -> None:
        self.name, self.address = name, address
        #: Whether a watcher reports this process's death (only a process that
        #: is a worker and nothing else: it takes over faulthandler and os._exit).
        self._watched = watch
        #: Seconds the watcher may take to hand over a certificate (a wave of
        #: deaths queues its reports at the scheduler: it grows with the launch).
        self._report_timeout = report_timeout
        self._security = security
        self.verdict: int | None = None
        self._closed = asyncio.Event()
        tuning.apply()
        #: The memory limit in bytes as Dask parses it ("4GiB", "auto", a fraction),
        #: or None for none.
        self.memory_limit = parse_memory_limit(memory_limit, nthreads)
        with _slow_scratch_said_once() as slow_scratch:
            self._worker: Worker = _Worker(
                address,
                name=name,
                nthreads=nthreads,
                memory_limit=self.memory_limit or 0,
                host=host,
                interface=interface,
                dashboard=False,
                death_timeout=timeout,
                security=security,
                protocol="tls" if security is not None else None,
                resources={**declared_resources(nthreads, self.memory_limit, gpus,
                                                workers_on_host),
                           **(resources or {})},
                validate=False,
                plugins=(ExpressOutbox(),),
                # Dask's worker extensions are its spans' alone: hpcfutures' scheduler
                # keeps no spans (scheduler.py, extensions_without_spans).
                extensions={},
            )
        #: What the worker tells the scheduler of itself once it has joined: its host
        #: name, for the client's word on a worker that left (Dask has only an
        #: address), and a slow scratch directory, which the scheduler folds into a
        #: line for a node's worth of workers.
        self._description: dict[str, Any] = {
            "name": name, "host": socket.gethostname(),
            "scratch": {"seconds": slow_scratch[0],
                        "directory": os.path.dirname(self._worker.local_directory)}
            if slow_scratch else None}
        self._worker.stream_handlers[VERDICT_OP] = self._record_verdict
        self._worker.stream_handlers["close"] = self.close
        self._worker.handlers["close"] = self.close

    def _record_verdict(self, status: int) -> None:
        if self.verdict is None:
            self.verdict = status
        quiet_for_shutdown()

    async def join(self) -> None:
        """Start the worker and register with the scheduler (raises if that fails)."""
        self._refuse_a_limit_it_already_crosses()
        await self._worker
        _hurry(self._worker.batched_stream)
        self._worker.log_event(WORKER_TOPIC, self._description)
        express.set_sender(send_express, bind_to_thread)
        memory.enforce(self.memory_limit)
        if self._watched:
            self._watch()

    def _watch(self) -> None:
        """Start the watcher that reports this worker's death, should a call cause it."""
        security = self._security
        # The launch's credentials, as make_security() took them (Security's
        # attributes are made from its keyword arguments).
        credentials = ({"cert": getattr(security, "tls_ca_file", None),
                        "key": getattr(security, "tls_client_key", None)}
                       if security is not None else None)
        deathwatch.set_key_source(running_task_key)
        deathwatch.start_watcher({"address": self.address, "credentials": credentials,
                                  "worker": str(self._worker.address), "who": location(),
                                  "report_timeout": self._report_timeout},
                                 keep_fds=deathwatch.launcher_fds())

    def _refuse_a_limit_it_already_crosses(self) -> None:
        """A memory limit the worker itself nearly fills is an error, not a silent hang.

        Dask pauses a worker whose process uses more than ``memory.pause`` (80 %)
        of its limit, until its memory goes down again: a worker that starts
        there would run no task, ever, and the client would wait for it forever
        (about 60 MiB of a worker's own; a limit of 100 MiB works).
        """
        import dask.config
        import psutil

        limit = self.memory_limit
        pause = dask.config.get("distributed.worker.memory.pause")  # as Dask reads it
        if not limit or pause is False:
            return
        in_use = psutil.Process().memory_info().rss  # as Dask's monitor measures it
        if in_use + JOINING_GROWTH >= pause * limit:
            raise ConfigurationError(
                f"memory_limit={memory.size(limit)} is too small for a worker: the worker "
                f"itself uses {memory.size(in_use)} before running anything, and Dask pauses "
                f"a worker above {pause:.0%} of its limit, so it could never run a task. Give "
                "each worker more memory (memory_limit=, HPCFUTURES_MEMORY_LIMIT or the job's "
                "memory request), or fewer workers per node")

    async def close(self, reason: str = "scheduler-close", **_: Any) -> None:
        """Close now, without waiting for running tasks.

        Dask's default close waits for them; once the launch is over nobody
        wants their results, and a week-long task must not keep the rank (and
        the allocation) alive.  Bounded: the rank leaves even if closing sticks.
        Whatever Dask says meanwhile (a heartbeat cut short, a running task's
        instruction cancelled) is noise: the worker is leaving on purpose.
        """
        quiet_for_shutdown()
        deathwatch.goodbye()
        try:
            await asyncio.wait_for(
                self._worker.close(reason=reason, executor_wait=False), self._close_limit())
        except (asyncio.TimeoutError, Exception):
            logger.debug("worker %s did not close cleanly", self.name, exc_info=True)
        finally:
            self._closed.set()

    def _close_limit(self) -> float:
        """Seconds this worker's close may take before its rank leaves regardless.

        Once the verdict is in, the client has what it wanted and nothing on
        this worker is worth waiting for; Dask's close can still stick (its
        goodbye to a scheduler that is closing too), and under MPI every
        rank's finalize, hence the launcher's return, waits for the slowest.
        """
        return CLOSE_TIMEOUT if self.verdict is None else VERDICT_CLOSE_TIMEOUT

    async def serve(self, stop: asyncio.Event | None = None) -> int | None:
        """Serve until the scheduler closes this worker (or ``stop`` is set).

        Returns the client's verdict as passed on by the scheduler, or None if
        the worker ended without one (the scheduler vanished, or a signal).
        """
        waits = [asyncio.ensure_future(self._worker.finished()),
                 asyncio.ensure_future(self._closed.wait()),
                 asyncio.ensure_future(self._closing_for_too_long())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        deathwatch.goodbye()  # leaving: whatever happens next is no call's doing
        if stop is not None and stop.is_set():
            await self.close("hpcfutures: stopped by a signal")
        return self.verdict


    async def _closing_for_too_long(self, poll: float = 0.25) -> None:
        """Return once Dask's worker has been closing for longer than its limit.

        When the scheduler's connection breaks before its close message
        arrives, Dask closes the worker itself, and that close can sit on
        retries to the vanished scheduler for its own 30 s timeout (under
        mpiexec, MPI_Finalize then waits for this rank).  The rank must not wait
        on it longer than on any other close.
        """
        closing_since = None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(poll)
            # Not "closing_gracefully": a retiring worker (idle release) is
            # still handing its results to the others, however long that takes.
            if self._worker.status.name not in ("stopping", "stopped", "closing", "closed",
                                                "failed"):
                closing_since = None
                continue
            closing_since = closing_since or loop.time()
            limit = self._close_limit()
            if loop.time() - closing_since >= limit:
                logger.debug("worker %s still closing after %g s; leaving anyway",
                             self.name, limit)
                return


def startup_error(err: BaseException) -> str:
    """What went wrong when a worker could not start, in one line: the first error.

    Dask's "Worker failed to start." says nothing by itself: the reason is its
    cause (an unknown interface, an address the host does not have...)."""
    seen = {id(err)}
    while (err.__cause__ or err.__context__) is not None:
        inner = err.__cause__ or err.__context__
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        err = inner
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def parse_memory_limit(memory_limit: str | float | None, nthreads: int) -> int | None:
    """A worker's memory limit in bytes, as Dask parses it for a worker of
    ``nthreads`` threads ("4GiB", "auto", a fraction of the host's memory, bytes;
    at most the host's memory); None (or 0) for none."""
    from distributed.worker_memory import parse_memory_limit as dasks_parse

    return dasks_parse(memory_limit or None, nthreads, logger=logger)


def declared_resources(nthreads: int, memory_limit: str | float | None, gpus: int,
                       workers_on_host: int = 1) -> dict[str, float]:
    """What a worker tells the scheduler it has, for calls that state needs
    (``_support/needs.py``): its threads, its own GPUs, its memory limit (without
    one, its share of the host's memory)."""
    from distributed.system import MEMORY_LIMIT

    limit = parse_memory_limit(memory_limit, nthreads)
    memory = limit or MEMORY_LIMIT // max(workers_on_host, 1)
    return {CORES: float(nthreads), GPUS: float(gpus), MEMORY: float(memory)}


async def run_worker(address: str, *, who: str, stop: asyncio.Event | None = None,
                     **options: Any) -> int | None:
    """Join the scheduler at ``address`` and serve; None if it could not join.

    A worker that cannot start tells the scheduler why (as ``who``): a
    setting only a worker can reject must not leave the client waiting."""
    from .client import report_startup_failure

    try:
        service = WorkerService(address, watch=True, **options)
        await service.join()
    except Exception as err:
        if not await report_startup_failure(address, who, startup_error(err), REPORT_TIMEOUT,
                                            options.get("security")):
            logger.error("%s could not start: %s", who, startup_error(err))
        return None
    return await service.serve(stop)

