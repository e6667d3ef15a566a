"""How an executor ends, the way ``ProcessPoolExecutor`` does: whenever it ends,
the calls already submitted still run.

::

    shutdown(wait=True)     cancel if asked; wait for the outstanding calls; finish the launch
    shutdown(wait=False)    the same in a non-daemon thread: returns at once, and the
                            interpreter waits for that thread before it exits
    executor lost (del)     weakref.finalize: as shutdown(wait=False) (no work in __del__)
    interpreter exit        a threading atexit hook (run before non-daemon threads are
                            joined) shuts every open executor down with wait=True; submit
                            from then on raises RuntimeError

"Finish the launch" is the session's: the other ranks (or the laptop's worker
processes) stop once the client's verdict reaches them.  A :class:`Closer`
holds what ending needs and never the executor itself, so that losing the last
reference to an executor can trigger its end.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..._support.logs import quiet_for_shutdown

__all__ = ["Closer", "exit_status_for", "interpreter_exiting"]

_lock = threading.Lock()
#: Closers of the executors not shut down yet (strong references: an executor
#: lost without shutdown must still finish its work).
_open: set[Closer] = set()
_hook_installed = False
_exiting = False


#: The exit statuses of a client stopped by Ctrl-C (KeyboardInterrupt) or SIGTERM.
SIGNALLED_STATUSES = (130, 143)


def exit_status_for(exc: BaseException | None) -> int:
    """The status the other ranks exit with when the client leaves with ``exc``."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def interpreter_exiting() -> bool:
    """Whether the interpreter has begun to shut down (no new calls are accepted)."""
    return _exiting


def _at_interpreter_exit() -> None:
    """Join every open executor's work, as the standard library does at exit."""
    global _exiting
    with _lock:
        _exiting = True
        closers = list(_open)
    # The program is ending: after an uncaught exception the other ranks fail too.
    status = exit_status_for(getattr(sys, "last_value", None))
    for closer in closers:
        closer.close(status, wait=True, cancel_futures=False)


def _forget_inherited() -> None:
    """In a process forked from this one (a ``ProcessPoolExecutor``'s worker, say), the
    open executors are copies: their loop thread did not come along, and the launch is
    not the child's to end.  Left in the list, the child's exit would wait for them."""
    global _lock
    _lock = threading.Lock()  # the parent may have held it as it forked
    _open.clear()


os.register_at_fork(after_in_child=_forget_inherited)


def _install_hook() -> None:
    global _hook_installed
    if _hook_installed:
        return
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - CPython has it since 3.9
        import atexit

        register = atexit.register
    register(_at_interpreter_exit)
    _hook_installed = True


class Closer:
    """Ends one executor's launch once its outstanding calls are done.

    Args:
        session: The executor's session (``finish(status)`` ends the launch).
        bridge: The executor's bridge, or None on a rank that is not the client.
        owner: The executor: when it is lost, its launch ends as with
            ``shutdown(wait=False)``.
    """

    def __init__(self, session: Any, bridge: Any, owner: object) -> None:
        self._session = session
        self._bridge = bridge
        self.lock = threading.Lock()
        self.shut = False
        #: The executor's ``map`` runs still going (their chunks are sent lazily).
        self.map_runs: weakref.WeakSet = weakref.WeakSet()
        #: Called once every call is done, before the launch ends (the journal's last write).
        self.when_drained: Callable[[], None] | None = None
        self._ended = threading.Event()
        if bridge is None:
            self.shut = True
            self._ended.set()
            return
        with _lock:
            _install_hook()
            _open.add(self)
        finalizer = weakref.finalize(owner, self.close, 0, wait=False, cancel_futures=False)
        finalizer.atexit = False  # the interpreter-exit hook has closed it already

    def close(self, status: int, *, wait: bool, cancel_futures: bool,
              abandon_maps: bool = False) -> None:
        """Refuse new calls, cancel what waits if asked, end once the rest is done.

        ``abandon_maps`` (leaving a ``with`` block on an exception) also
        cancels the ``map`` chunks already on the workers.
        """
        with self.lock:
            first, self.shut = not self.shut, True
        if first:
            if cancel_futures:
                self._cancel_waiting(abandon_maps)
                if self._bridge is not None and (self._bridge.stopped_by_signal
                                                 or status in SIGNALLED_STATUSES):
                    # SIGTERM or Ctrl-C reached every rank: the calls still running
                    # die with their workers, and the scheduler's going may not be
                    # noticed before the end; waiting for them could only hang.  A
                    # Ctrl-C (KeyboardInterrupt, 130) says so before the scheduler's
                    # news of it arrives: waiting would then hold the client until the
                    # launcher's grace runs out (10 s under hpcfutures run).
                    quiet_for_shutdown()  # Dask's news of closing peers is only echo now
                    self._bridge.break_executor("the launch was stopped by a signal")
            if wait:
                self._end(status)
            else:
                threading.Thread(target=self._end, args=(status,), daemon=False,
                                 name="hpcfutures-shutdown").start()
        if wait:
            self._ended.wait()

    def _cancel_waiting(self, abandon_maps: bool) -> None:
        """Cancel the calls not started yet; calls already sent to a worker finish."""
        assert self._bridge is not None
        for run in list(self.map_runs):
            if abandon_maps:
                run.cancel()
            else:
                run.stop_sending()
        self._bridge.cancel_all()

    def _end(self, status: int) -> None:
        assert self._bridge is not None
        try:
            for run in list(self.map_runs):
                run.finished.wait()
            cf.wait(self._bridge.outstanding())
            if self.when_drained is not None:
                self.when_drained()
            self._session.finish(status)
        finally:
            with _lock:
                _open.discard(self)
            self._ended.set()
