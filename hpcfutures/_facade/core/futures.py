"""The futures an executor hands out, and the one way they are completed.

A :class:`TaskFuture` is a real :class:`concurrent.futures.Future`, so
``wait``, ``as_completed`` and ``add_done_callback`` work unchanged.  The
engine's record of its call (:mod:`.records`) says how its value can be reached
on the cluster (its Dask future, or its place in a bundle), so that passing it
to another ``submit`` makes a dependency that Dask resolves worker to worker.

Several paths may complete the same future (its task finished, its bundle
failed, the executor broke); :func:`settle` lets the first one win.
"""

from __future__ import annotations

import _thread
import concurrent.futures as cf
import logging
import threading
from typing import Any

from .records import Call

__all__ = ["TaskFuture", "mark_running", "settle"]

#: Where the standard library logs a failed done-callback, so it reads the same.
_logger = logging.getLogger("concurrent.futures")


class _LeanCondition:
    """What a future needs of :class:`threading.Condition`, in a ninth of its memory.

    A ``Future`` makes a ``threading.Condition`` for its whole life: about 1.36 KB
    (an RLock, seven bound methods in an instance dictionary, and an empty deque
    that holds a 64-slot block), most of a future's memory, so 10⁶ submitted
    calls would hold 1.4 GB in conditions that almost no one waits on.  This
    one (about 150 bytes) keeps the lock and makes its list of waiters only
    when a thread waits.
    ``concurrent.futures`` uses ``with``, ``acquire``/``release`` (``wait`` and
    ``as_completed`` take every future's lock), ``wait`` and ``notify_all``; the
    waiting is ``threading.Condition.wait``'s own: a fresh lock per waiter, the
    RLock released whole meanwhile and restored after, even on an interrupt.
    """

    __slots__ = ("_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiters: list[Any] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock until notified or ``timeout`` s passed (the caller holds it)."""
        waiter = _thread.allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        saved = self._lock._release_save()  # type: ignore[attr-defined]  # as Condition does
        notified = False
        try:
            if timeout is None:
                notified = waiter.acquire()
            elif timeout > 0:
                notified = waiter.acquire(True, timeout)
            else:
                notified = waiter.acquire(False)
            return notified
        finally:
            self._lock._acquire_restore(saved)  # type: ignore[attr-defined]
            if not notified and self._waiters is not None:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    def notify_all(self) -> None:
        """Wake every waiting thread (the caller holds the lock)."""
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            waiter.release()


class TaskFuture(cf.Future):
    """A ``concurrent.futures.Future`` for a task of an hpcfutures executor.

    It holds no engine state of its own: ``_call`` is the engine's record of its
    call (:class:`~.records.Call`), which only the engine reads.
    """

    def __init__(self) -> None:
        super().__init__()
        self._condition = _LeanCondition()  # type: ignore[assignment]  # see _LeanCondition
        self._call = Call()

    def set_result(self, result: Any) -> None:
        self._call.settled()
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        self._call.settled()
        super().set_exception(exception)

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled:
            self._call.settled()
        return cancelled

    def _invoke_callbacks(self) -> None:
        """Run the done-callbacks; whatever one raises is logged and goes no further.

        The standard library contains a callback's ``Exception`` and lets a
        ``BaseException`` through; here callbacks run on the executor's event-loop
        thread, which a ``SystemExit`` or ``KeyboardInterrupt`` from a callback
        would end, and every later call with it.  On the user's main thread (a
        future cancelled or settled there) a ``KeyboardInterrupt`` or ``SystemExit``
        goes through, as in the standard library: it may be the user's Ctrl-C or
        SIGTERM, landing while a callback ran.  (Overrides the private method
        that ``concurrent.futures.Future`` calls on completion, unchanged since 3.2.)
        """
        for callback in self._done_callbacks:  # type: ignore[attr-defined]
            try:
                callback(self)
            except BaseException as err:
                if (isinstance(err, (KeyboardInterrupt, SystemExit))
                        and threading.current_thread() is threading.main_thread()):
                    # On the user's thread (a future settled or cancelled there) it may
                    # be their Ctrl-C or SIGTERM, landing while a callback ran: theirs
                    # to receive, as the standard library lets it through.
                    raise
                _logger.exception("exception calling callback for %r", self)


def settle(future: cf.Future, result: Any = None, exception: BaseException | None = None) -> None:
    """Complete ``future`` unless the user cancelled it (or it is already done).

    A future may already be RUNNING (sent to a worker inside a bundle, so it
    can no longer be cancelled, as with ``ProcessPoolExecutor``).
    """
    if future.done():
        # Settled by another path first (a result gathered, then its task
        # reported lost in a wave of deaths): asking the standard library to
        # mark it running would log CRITICAL "in unexpected state: FINISHED"
        # (a line for each such future: dozens in a large wave).
        return
    if not future.running():
        try:
            if not future.set_running_or_notify_cancel():
                return
        except RuntimeError:  # finished meanwhile (e.g. failed by a broken executor)
            if not future.running():
                return
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except cf.InvalidStateError:
        pass  # settled by another path first (a broken executor)


def mark_running(future: cf.Future) -> None:
    """Sent to a worker: like ``ProcessPoolExecutor``'s call queue, no longer cancellable."""
    if future.done() or future.running():  # running: sent again (given back by a worker)
        return
    try:
        future.set_running_or_notify_cancel()
    except RuntimeError:
        pass  # already settled (e.g. by a broken executor)
