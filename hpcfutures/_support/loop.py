"""The one seam between the user's synchronous code and the asyncio core.

The client keeps a single event loop in a daemon thread; everything Dask does
on the client runs there.  Synchronous code reaches it only through
:meth:`LoopThread.run_sync` (wait for a coroutine, with a deadline) and
:meth:`LoopThread.call_soon` (fire and forget).  The engine's methods that
must run there say so with :func:`loop_thread_only`, checked in Python's
development mode (``python -X dev`` or ``PYTHONDEVMODE=1``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from .logs import dask_silenced, quiet_for_shutdown

__all__ = ["LoopThread", "loop_thread_only", "run_until_complete", "stop_on_signals"]

T = TypeVar("T")
P = ParamSpec("P")

#: Marks the threads of :class:`LoopThread` (``here`` is true in them).
_LOOP_THREADS = threading.local()


def loop_thread_only(method: Callable[P, T]) -> Callable[P, T]:
    """Mark ``method`` as one that runs on a :class:`LoopThread`'s loop only: it
    touches the Dask client (not thread-safe) or the engine's records.

    In Python's development mode a call from any other thread raises
    ``AssertionError`` naming the method and the thread; otherwise the method is
    returned as it is (no cost).  Read when the method is defined: the mode is
    set before the interpreter starts.
    """
    if not sys.flags.dev_mode:
        return method

    @functools.wraps(method)
    def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        if not getattr(_LOOP_THREADS, "here", False):
            raise AssertionError(
                f"{method.__qualname__} runs on the executor's loop thread only, "
                f"called on thread {threading.current_thread().name!r}")
        return method(*args, **kwargs)

    return checked


class LoopThread:
    """An asyncio event loop running in its own daemon thread."""

    def __init__(self, name: str = "hpcfutures-loop") -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _run(self) -> None:
        _LOOP_THREADS.here = True
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            _cancel_leftover_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run ``coro`` on the loop and wait for its result, at most ``timeout`` s.

        On expiry the coroutine is cancelled and :class:`TimeoutError` raised;
        callers turn it into an error that names what was awaited.
        """
        if self.in_loop_thread():
            raise RuntimeError("run_sync called from the event-loop thread (would deadlock)")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError) as err:
            if future.done() and not future.cancelled():
                if isinstance(err, TimeoutError):
                    raise  # the coroutine's own TimeoutError
                # Before Python 3.11 asyncio's and concurrent.futures' TimeoutErrors were
                # classes of their own: callers catch the builtin one, so give them that.
                raise TimeoutError(str(err) or "the awaited call timed out") from err
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Schedule ``callback(*args)`` on the loop from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and join its thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if not self.in_loop_thread():
            self._thread.join(timeout)


def _cancel_leftover_tasks(loop: asyncio.AbstractEventLoop, grace: float = 1.0) -> None:
    """Cancel what still runs on a stopping loop, and let it unwind briefly."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not tasks:
        return
    # Dask logs a cancelled background task of its own (a client still
    # reconnecting to a scheduler that has gone) as an error: here it is only
    # the end of this loop.
    with dask_silenced():
        for task in tasks:
            task.cancel()
        waiting = asyncio.gather(*tasks, return_exceptions=True)
        loop.run_until_complete(asyncio.wait([waiting], timeout=grace))


def run_until_complete(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop in this thread and return its result.

    Unlike :func:`asyncio.run` this does not wait for the loop's default
    executor at the end: a thread stuck in a blocking call must not keep a
    rank alive after its work is done.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        _cancel_leftover_tasks(loop)
        loop.close()


#: The handlers SIGTERM/SIGINT had before :func:`stop_on_signals` routed them to a
#: loop: what a forked child gets back (see :func:`_forget_the_loops_signals`).
_BEFORE_ROUTING: dict[int, Any] = {}


def stop_on_signals(callback: Callable[[int], object]) -> None:
    """Route SIGTERM/SIGINT to ``callback(signum)`` on the running loop.

    A rank that serves (scheduler or worker) ends through its own event loop, so
    the signal becomes a call there instead of an exception in whatever the loop
    was doing.
    """
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        _ignore_repeats(loop)
        # The launch is being stopped: what Dask says from now on about peers
        # closing around this rank is only an echo of that.
        quiet_for_shutdown()
        callback(signum)

    for signum in _ROUTED:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            previous = signal.getsignal(signum)
            loop.add_signal_handler(signum, stop, signum)
            _BEFORE_ROUTING.setdefault(signum, previous)
            _forget_in_forked_children()


def _ignore_repeats(loop: asyncio.AbstractEventLoop) -> None:
    """Once a signal has stopped this rank, ignore SIGTERM and Ctrl-C until it has left.

    A stop reaches a rank more than once: the process group gets it (a
    ``kill`` of the job, ``scancel``) and the launcher forwards its own copy
    (``hpcfutures run``, ``srun``, ``mpiexec``), or a user presses Ctrl-C twice.
    The first one already ends the rank, in order.  But closing the loop gives
    the signals their default actions back, and a copy landing between that
    and the process's end would kill a rank that is leaving cleanly: its status
    would be the signal's (143) instead of its own (0 in a serving launch).
    SIGKILL, which every launcher sends after
    its grace, still ends a rank stuck on its way out.  (A process started
    from here on inherits the ignored signals across exec: hpcfutures starts
    none, and one that a call still running starts is ended by the worker
    rank's SIGKILL after its SIGTERM, see ``_remote/leftovers.py``; a serving
    launch's workers do not end such processes yet.)
    """
    handlers = getattr(loop, "_signal_handlers", None)
    for signum in _ROUTED:
        with contextlib.suppress(ValueError):  # not the main thread: nothing to change
            signal.signal(signum, signal.SIG_IGN)
            if isinstance(handlers, dict):
                # Private to asyncio's Unix loop, read on purpose: its close (and its
                # public remove_signal_handler) would set the default action back.
                handlers.pop(signum, None)
            else:  # another loop: a moment of the default action, then ignored again
                loop.remove_signal_handler(signum)
                signal.signal(signum, signal.SIG_IGN)
    if isinstance(handlers, dict) and not handlers:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)  # as remove_signal_handler does for the last one


#: The signals stop_on_signals routes to a loop; held back in a thread while it forks (see below).
_ROUTED = (signal.SIGTERM, signal.SIGINT)
#: Per forking thread: its signal mask before the fork.
_MASKS_BEFORE_FORK: dict[int, set[int | signal.Signals]] = {}


@functools.cache
def _forget_in_forked_children() -> None:
    """Once per process: forked children drop the routing (see below).

    The routed signals are blocked in the forking thread across the fork, so
    that the child starts with them pending rather than delivered: a child
    that the kernel had not even run yet when its parent signalled it (a
    ``multiprocessing.Pool`` ended right after it started, on a busy machine)
    would otherwise take the signal through the routing it inherited, before
    it could undo it.  The parent rank would then stop as if signalled, and
    the child, its handler a no-op, would outlive it, holding the launcher's
    output pipe (``mpiexec`` would never return).
    """
    os.register_at_fork(before=_hold_routed_signals, after_in_parent=_release_routed_signals,
                        after_in_child=_forget_the_loops_signals)


def _hold_routed_signals() -> None:
    _MASKS_BEFORE_FORK[threading.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, _ROUTED)


def _release_routed_signals() -> None:
    mask = _MASKS_BEFORE_FORK.pop(threading.get_ident(), None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forget_the_loops_signals() -> None:
    """In a child forked from a rank (``multiprocessing.Pool`` in a task): undo the routing.

    asyncio routes a signal through a wake-up socket that the child inherits:
    a SIGTERM the child receives (``Pool`` terminates its processes when its
    ``with`` block ends) would be written to the parent's socket, and the rank
    would stop as if it had received the signal itself.  The child gets its
    own wake-up descriptor back (none) and the handlers from before the routing.
    """
    try:
        with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing to undo
            signal.set_wakeup_fd(-1)
            for signum, handler in _BEFORE_ROUTING.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    finally:
        _release_routed_signals()  # a signal that came meanwhile is taken now, as it should be
