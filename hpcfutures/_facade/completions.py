"""Completing futures as their Dask tasks end, without a round trip per task.

The scheduler streams each task's end to the client; a finished task's result
is then fetched together with every other result ready at that moment (one
``gather`` for the lot).  If a batch cannot be fetched whole, its results are
fetched one by one, so that one unpicklable result fails only its own future.
Loop thread only.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from .._errors import RemoteTraceback, SerializationError
from .._remote.calls import restore_traceback
from .futures import TaskFuture, settle

__all__ = ["Completions"]


class Completions:
    """Settles :class:`TaskFuture` objects from their Dask futures.

    Args:
        client: The Dask client.
        lost: Called when a task ended neither finished nor erred while its
            future still waits: the connection to the scheduler is gone.
    """

    def __init__(self, client: Any, lost: Callable[[], None]) -> None:
        self._client = client
        self._lost = lost
        #: ``recover(dask_future, future, exception)``: whether it takes over a task
        #: lost with its worker (recovery.py); set by the bridge.
        self.recover: Callable[[Any, TaskFuture, BaseException], bool] | None = None
        self._ready: list[tuple[Any, TaskFuture]] = []
        self._gathering = False
        #: Tasks running in the background, kept so the loop does not drop them.
        self._background: set[asyncio.Future] = set()
        #: Set by worker_left while a gather is in progress: stop waiting for it.
        self._abandon: asyncio.Future[None] | None = None

    def worker_left(self) -> None:
        """A worker left: stop waiting for the gather in progress, and ask again.

        Results it held are computed again elsewhere, but a gather already under
        way keeps trying the dead worker's address (Dask's connect retries a
        refused connection for its whole timeout, and then asks again), and
        every result that finished since waits behind it.

        The old gather is left to end on its own, never cancelled: Dask's client
        lets gathers that arrive while one waits for its turn join that one, and
        a gather cancelled before its turn came leaves the client's shared slot
        holding a cancelled task, which every later gather then joins and fails
        with (distributed 2025.9 to 2026.8 at least: the crash test hung in CI,
        with every result after a worker's death never delivered).
        """
        if self._abandon is not None and not self._abandon.done():
            self._abandon.set_result(None)

    def in_background(self, awaitable: Any) -> asyncio.Future:
        """Run ``awaitable`` on the loop without waiting for it (kept alive until it ends)."""
        task = asyncio.ensure_future(awaitable)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def follow(self, dask_future: Any, future: TaskFuture) -> None:
        """Settle ``future`` when ``dask_future`` ends."""
        self.in_background(self._watch(dask_future, future))

    async def _watch(self, dask_future: Any, future: TaskFuture) -> None:
        exception = await dask_future.exception()
        status = dask_future.status
        while status == "lost":
            # Finished, then its result was lost with its worker before this
            # coroutine ran (a wave of deaths): Dask computes it again, as the
            # client still holds it.  Not a lost scheduler.
            exception = await dask_future.exception()
            status = dask_future.status
        if status == "finished":
            self._ready.append((dask_future, future))
            if not self._gathering:
                self._gathering = True
                self.in_background(self._gather_ready())
        elif status == "error":
            if self.recover is not None and self.recover(dask_future, future, exception):
                return
            settle(future, exception=_as_serialization_error(restore_traceback(exception)))
        elif not future.done():
            self._lost()

    async def _gather_ready(self) -> None:
        """Fetch finished results in batches: one round trip for many tasks."""
        try:
            while self._ready:
                batch, self._ready = self._ready, []
                wanted = [(d, f) for d, f in batch if not f.done()]
                if not wanted:
                    continue
                fetch = self.in_background(self._client.gather([d for d, _ in wanted]))
                abandon = self._abandon = asyncio.get_running_loop().create_future()
                try:
                    # Not cancelled with this task (the loop stopping): see worker_left.
                    await asyncio.wait({fetch, abandon}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self._abandon = None
                if not fetch.done():  # a worker left: ask again (see worker_left)
                    fetch.add_done_callback(functools.partial(_late, wanted))
                    self._ready[:0] = wanted
                    continue
                try:
                    values = fetch.result()
                except (Exception, asyncio.CancelledError):
                    values = None
                if values is None:
                    await self._gather_one_by_one(wanted)
                    continue
                for (_, future), value in zip(wanted, values, strict=False):
                    settle(future, result=value)
        finally:
            self._gathering = False

    async def _gather_one_by_one(self, batch: list[tuple[Any, TaskFuture]]) -> None:
        for dask_future, future in batch:
            try:
                value = await self._client.gather(dask_future)
            except Exception as err:
                # A finished result whose worker died before it was fetched: Dask
                # computes it again, and may find it lost once more (its worker
                # died in the same wave): recovery decides, as for any lost task.
                if self.recover is not None and self.recover(dask_future, future, err):
                    continue
                settle(future, exception=_as_serialization_error(restore_traceback(err)))
            else:
                settle(future, result=value)


def _late(batch: list[tuple[Any, TaskFuture]], fetch: asyncio.Future) -> None:
    """An abandoned gather ended: its results settle what is still waiting (the
    gather asked again settles the rest); its error, if any, is dropped."""
    if fetch.cancelled() or fetch.exception() is not None:
        return
    for (_, future), value in zip(batch, fetch.result(), strict=False):
        if not future.done():
            settle(future, result=value)


def _as_serialization_error(exc: BaseException) -> BaseException:
    """Dask's own failure to pickle a task or its result, as a :class:`SerializationError`.

    A call's own exceptions carry their remote traceback and are left alone;
    a ``TypeError`` without one was raised by Dask while (de)serializing.
    """
    if (type(exc) is not TypeError or isinstance(exc.__cause__, RemoteTraceback)
            or "serializ" not in str(exc).lower()):
        return exc
    wrapped = SerializationError(
        f"{exc}. A call's function, arguments and result must be picklable with cloudpickle "
        "(no open files, locks, sockets or generators)")
    wrapped.__cause__ = exc
    return wrapped
