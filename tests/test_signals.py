"""The client's signals in one process: SIGTERM raised once, and no stop ever lost.

A signal's handler runs between two bytecodes of whatever Python code the
main thread runs; inside a garbage-collector callback (Dask registers one)
its exception is dropped ("Exception ignored in ..."). These tests put the
signal there on purpose, as ``map(f, itertools.count())`` did by chance.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from hpcfutures._support.signals import StopSignals

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def told() -> Iterator[list[int]]:
    """The signals StopSignals said it stops for (installed in each test's own body:
    pytest puts its own unraisable hook in place around each phase of a test)."""
    heard: list[int] = []
    yield heard
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "SIGTERM left routed"


def in_gc_callback(action: Callable[[], object]) -> None:
    """Run ``action`` inside a garbage-collector callback, then a few bytecodes there."""
    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            action()
            for _ in range(100):  # the handler runs here, and its exception is dropped
                pass

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


def python_code(seconds: float = 5.0) -> None:
    """Bytecodes of an ordinary frame, where a signal's exception propagates: as the
    loop in ``map`` that reads its items."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def test_a_sigterm_dropped_in_a_gc_callback_is_raised_again_where_it_can_propagate(told):
    stop = StopSignals(told.append)
    assert stop.install()
    try:
        with pytest.raises(SystemExit) as raised:
            in_gc_callback(lambda: os.kill(os.getpid(), signal.SIGTERM))
            python_code()
        assert raised.value.code == 128 + signal.SIGTERM
        assert told == [signal.SIGTERM], "the reason is given once, not at each delivery"
    finally:
        stop.uninstall()


def test_a_second_sigterm_does_not_cut_the_orderly_end_short(told):
    stop = StopSignals(told.append)
    assert stop.install()
    try:
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            python_code()
        os.kill(os.getpid(), signal.SIGTERM)  # Slurm's time limit sends it twice
        python_code(0.2)
    finally:
        stop.uninstall()
    assert told == [signal.SIGTERM]


def test_a_ctrl_c_dropped_in_a_gc_callback_is_raised_again(told):
    # Python's own Ctrl-C handler, whatever started this process (a background
    # job of a shell ignores SIGINT): the test never depends on how it was run.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = StopSignals(told.append)
    assert stop.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            in_gc_callback(lambda: os.kill(os.getpid(), signal.SIGINT))
            python_code()
    finally:
        stop.uninstall()
        signal.signal(signal.SIGINT, previous)
    assert told == []  # Ctrl-C keeps Python's own handler


def test_other_dropped_exceptions_go_to_the_previous_hook(told):
    seen: list[BaseException | None] = []
    previous, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    stop = StopSignals(told.append)
    try:
        assert stop.install()
        in_gc_callback(lambda: 1 / 0)
        stop.uninstall()
        assert sys.unraisablehook is not stop._on_unraisable
    finally:
        stop.uninstall()
        sys.unraisablehook = previous
    assert [type(error) for error in seen] == [ZeroDivisionError]


def test_a_handler_of_the_users_own_is_left_alone(told):
    mine = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        assert not StopSignals(told.append).install()
    finally:
        signal.signal(signal.SIGTERM, mine)


def test_a_handler_uninstalled_from_another_thread_gives_way(told):
    """shutdown(wait=False) ends the launch in a background thread, where Python cannot
    remove a signal handler: the next executor (or the default) takes SIGTERM back."""
    first = StopSignals(told.append)
    assert first.install()
    remover = threading.Thread(target=first.uninstall)
    remover.start()
    remover.join(5)
    assert signal.getsignal(signal.SIGTERM) == first._on_sigterm  # still there, inert
    second = StopSignals(told.append)
    assert second.install(), "a left-over handler must not count as the user's own"
    second.uninstall()


def test_a_sigterm_reaching_a_left_over_handler_acts_as_the_default():
    code = textwrap.dedent("""
        import signal, threading, os
        from hpcfutures._support.signals import StopSignals
        stops = StopSignals(print)
        stops.install()
        t = threading.Thread(target=stops.uninstall); t.start(); t.join()
        os.kill(os.getpid(), signal.SIGTERM)
        print("still alive")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    assert "still alive" not in done.stdout
