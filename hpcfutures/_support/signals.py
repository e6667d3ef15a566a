"""SIGTERM and Ctrl-C in the client's main thread: raised where they land, never lost.

Python runs a signal's handler in the main thread, between two bytecodes of
whatever Python code runs there at the time.  That may be code whose
exceptions Python cannot propagate: a garbage-collector callback (Dask
registers one), a ``__del__`` method, a weakref callback.  The handler's
:class:`SystemExit` (or Ctrl-C's :class:`KeyboardInterrupt`) is then printed
as "Exception ignored in ..." and dropped, and the program goes on as if no
signal had come.  Python reports each such drop to ``sys.unraisablehook``;
:class:`StopSignals` watches it and delivers a dropped stop again a moment
later, from another thread, once the main thread has left the code that
dropped it.  (Delivered at once, the handler would run in the hook itself,
still inside that code, and be dropped again.)

SIGTERM is raised as ``SystemExit(143)`` once: Slurm's time limit sends it
twice, and a second one would cut short the orderly end the first began.
Only a first one that was dropped is raised again.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["StopSignals", "children_start_deaf_to_ctrl_c", "ignore_ctrl_c"]


class StopSignals:
    """While installed: SIGTERM raises ``SystemExit(128 + SIGTERM)`` in the main thread,
    and a SIGTERM or Ctrl-C whose exception Python dropped is delivered again.

    Args:
        on_stop: Called with the signal number before SIGTERM's ``SystemExit`` is first
            raised (to say why the client stops).
    """

    def __init__(self, on_stop: Callable[[int], object]) -> None:
        self._on_stop = on_stop
        self._installed = False
        self._previous_hook: Callable[[Any], object] | None = None
        #: The SystemExit raised for SIGTERM and not dropped: the end is under way.
        self._raised: SystemExit | None = None
        self._told = False

    def install(self) -> bool:
        """Take SIGTERM over (unless someone else handles it) and watch for dropped stops.

        Main thread only (Python delivers signals there); elsewhere it does nothing.
        """
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL and not _left_over(current):
            return False  # the user has their own handler: theirs to keep
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._previous_hook = sys.unraisablehook
        sys.unraisablehook = self._on_unraisable
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Give SIGTERM its default back (the launch is ending: a signal now is a kill)."""
        if not self._installed:
            return
        self._installed = False
        with contextlib.suppress(ValueError):  # not the main thread any more
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if sys.unraisablehook == self._on_unraisable:
            sys.unraisablehook = self._previous_hook or sys.__unraisablehook__

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if not self._installed:
            # Uninstalled from another thread (an executor shut down with
            # wait=False ends its launch in the background), where Python
            # cannot change a handler: act as the default would, and step aside.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        if self._raised is not None:
            return  # raised already and on its way: the orderly end must not be cut short
        if not self._told:
            self._told = True
            self._on_stop(signum)
        self._raised = SystemExit(128 + signum)
        raise self._raised

    def _on_unraisable(self, unraisable: Any) -> None:
        """Python dropped an exception; if it was a stop, deliver the signal again."""
        error = unraisable.exc_value
        if error is not None and error is self._raised:
            self._raised = None
            _deliver_again(signal.SIGTERM)
            return
        if (isinstance(error, KeyboardInterrupt)
                and threading.current_thread() is threading.main_thread()):
            _deliver_again(signal.SIGINT)
            return
        (self._previous_hook or sys.__unraisablehook__)(unraisable)


def _left_over(handler: object) -> bool:
    """A handler of a StopSignals that was uninstalled where it could not be removed."""
    owner = getattr(handler, "__self__", None)
    return isinstance(owner, StopSignals) and not owner._installed


#: Seconds after a drop before the signal is delivered again: time for the main
#: thread to leave the code that dropped it (a collection takes milliseconds).
AGAIN_AFTER = 0.01
#: Seconds the delivery waits at most for the main thread to leave the hook.
HOOK_LEFT_WITHIN = 5.0


def _deliver_again(signum: signal.Signals) -> None:
    """Make the main thread handle ``signum`` again, shortly, wherever it is then,
    but never while it is still in the hook that reported the drop: the hook waits
    for the delivering thread to start, and on a loaded machine that thread can run
    its whole delay first; delivered then, the signal would be dropped again."""
    main = threading.main_thread().ident

    def deliver() -> None:
        time.sleep(AGAIN_AFTER)
        deadline = time.monotonic() + HOOK_LEFT_WITHIN
        while _in_the_hook(main) and time.monotonic() < deadline:
            time.sleep(max(AGAIN_AFTER, 0.001))  # a test sets no delay: never spin
        _thread.interrupt_main(signum)

    threading.Thread(target=deliver, name="hpcfutures-signal-again", daemon=True).start()


def _in_the_hook(thread_id: int | None) -> bool:
    """Whether the thread ``thread_id`` runs StopSignals' unraisable hook now.

    ``sys._current_frames`` is CPython's documented way to look at another
    thread's stack (the underscore marks it as meant for tools such as this)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    while frame is not None:
        if frame.f_code is StopSignals._on_unraisable.__code__:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def children_start_deaf_to_ctrl_c() -> Iterator[None]:
    """Processes started inside begin with Ctrl-C (SIGINT) held back, not delivered.

    A helper process (a worker's watcher, a laptop worker) leaves Ctrl-C to its
    parent and ignores it, but only once its own code runs: a Ctrl-C that reaches
    the process group while its interpreter is still starting would kill it
    with "Fatal Python error: init_import_site" and a traceback (``srun`` sends
    Ctrl-C to every task at once).  The signal mask survives fork and exec, so
    the child starts with
    SIGINT blocked; :func:`ignore_ctrl_c` then drops a Ctrl-C that came meanwhile.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_ctrl_c() -> None:
    """In a child started by :func:`children_start_deaf_to_ctrl_c`: ignore Ctrl-C from now on.

    Ignoring a signal discards one already pending, so unblocking it then lets
    nothing through.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
