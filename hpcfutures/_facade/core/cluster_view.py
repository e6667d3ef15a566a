"""The bridge's view of the cluster: its size, questions to the scheduler, the watchdog.

Dask tells the client how many workers and threads there are as they join and
leave (``cluster_changed``); the batching engine sizes its groups by the
threads.  The watchdog breaks the executor when calls wait and no worker is
left, at once when the scheduler says none can come, else after the launch's
timeout, so that work submitted after the last worker died does not wait forever.

A base of :class:`~hpcfutures._facade.bridge.TaskBridge`, which holds the state
declared here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import BrokenHPCExecutor
from ..._support.loop import LoopThread
from ..._support.patience import Patience
from .capacity import WorkerMemory, ask_worker_memory
from .completions import Completions
from .direct import DirectLane
from .recovery import Recovery
from .roster import WorkerRoster

__all__ = ["ClusterView"]


class ClusterView:
    """The cluster as the client sees it (loop thread, unless a method says otherwise)."""

    _loop: LoopThread
    _client: Any
    _address: str
    _lock: threading.Lock
    _workers: int
    _total_threads: int
    _closing: bool
    _broken: BrokenHPCExecutor | None
    _completions: Completions
    _recovery: Recovery
    roster: WorkerRoster
    direct: DirectLane

    if TYPE_CHECKING:  # the bridge's own
        def waiting(self) -> int: ...

        def break_executor(self, reason: str, cause: BaseException | None = None) -> None: ...

        @property
        def patience(self) -> Patience: ...

    def worker_threads(self) -> int:
        """Worker threads in the cluster, as last seen by the loop thread.  Any thread
        may ask; only the loop thread touches the Dask client (from another thread its
        methods block on the loop, a deadlock when the loop waits on the caller)."""
        return self._total_threads

    def worker_memory(self, timeout: float) -> dict[str, WorkerMemory]:
        """Each worker's memory, asked of the scheduler now (not from the loop thread)."""
        try:
            return self._loop.run_sync(ask_worker_memory(self._client), timeout)
        except TimeoutError as err:
            raise TimeoutError(
                f"the scheduler at {self._address} did not report its workers' memory "
                f"within {timeout:g} s (HPCFUTURES_TIMEOUT)") from err

    def workers_now(self, timeout: float) -> int:
        """Workers connected right now, asked of the scheduler (not from the loop thread)."""
        return self._loop.run_sync(self._live_workers(), timeout)

    def ask(self, question: Callable[[Any], Any], timeout: float) -> Any:
        """``await question(client)`` on the loop, answered within ``timeout`` s (not from it)."""
        return self._loop.run_sync(question(self._client), timeout)

    def cluster_changed(self, workers: int, threads: int, left: Sequence[str] = ()) -> None:
        """The scheduler's word on the workers and threads present, and on those that
        left since it last spoke (loop thread).

        Connections to a worker that left are dropped, and attempts to connect
        there end: Dask's connect retries a refused port for its whole timeout
        (30 s), holding a gather that asked it and one of Dask's five gather slots.
        """
        for address in left:
            self._client.rpc.remove(address, reason=f"worker {address} left the cluster")
            self.direct.avoid(address)
        if workers < self._workers or left:
            self._completions.worker_left()
        self._workers = workers
        self._total_threads = max(1, threads)

    async def _live_workers(self) -> int:
        """Workers connected right now, asked of the scheduler (before breaking anything)."""
        from ... import _dask

        try:
            workers, threads = await asyncio.wait_for(_dask.cluster_size(self._client),
                                                      self.patience.ask_timeout)
        except Exception:  # the scheduler is gone: _watch breaks the executor for that
            return self._workers
        self.cluster_changed(workers, threads)
        return self._workers

    async def watch_workers(self, deadline: float, interval: float = 0.5) -> None:
        """Break the executor if tasks wait while no worker exists for ``deadline`` s.

        Without this, work submitted after the last worker died (killed,
        out of memory, node failure) would wait forever.
        """
        alone_since = None
        loop = asyncio.get_running_loop()
        await self.roster.refresh(self._client, self._is_closing,  # a worker may die soon
                                  self.patience.ask_timeout)
        while self._broken is None and not self._closing:
            await asyncio.sleep(interval)
            workers = self._workers
            if self.waiting():  # the scheduler's events say the same, but ask
                workers = await self._live_workers()
            if workers != len(self.roster.seen):
                await self.roster.refresh(self._client, self._is_closing,
                                          self.patience.ask_timeout)
            if not workers and not self._closing and self.waiting():
                # Calls wait and no worker can ever come (all died, or were
                # released as idle): say so now, not after `deadline`.
                none_left = await self._recovery.none_left()
                if none_left:
                    self.break_executor(none_left)
                    return
            if workers or not self.waiting():
                alone_since = None
                continue
            alone_since = alone_since or loop.time()
            if loop.time() - alone_since >= deadline:
                self.break_executor(
                    f"no worker has been connected for {deadline:g} s while "
                    f"{self.waiting()} task(s) waited: every worker is gone "
                    f"(killed, out of memory, or its node failed); {self.roster.describe_lost()}")

    @property
    def crash_status(self) -> int | None:
        """The exit status of the first worker a call killed, if one did (signals: 128+N)."""
        return self._recovery.crash_status

    def _is_closing(self) -> bool:
        return self._closing
