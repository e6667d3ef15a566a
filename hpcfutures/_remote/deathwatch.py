"""Who is running what, written where a dying worker cannot take it with it.

A call that ends its worker's process (``os._exit``, a segfault in a C
extension, an abort) takes the process's memory with it, and Dask only learns
that the worker is gone.  So each worker process keeps two things outside
itself:

* **the slot**: a small shared-memory table (a file under ``/dev/shm``,
  unlinked at once, its descriptor handed to the watcher) where each worker
  thread writes which call it is running: the Dask key of the group (a
  ``map`` chunk, a bundle of ``submit`` calls, one call), the call's index in
  that group and the function's name.  Per call that is one ``pack_into`` of
  two integers (see :func:`running`); the name is written once per group.
* **the watcher** (:mod:`.watcher`), a small process started beside the worker,
  reading a pipe whose write end only the worker holds.  :mod:`faulthandler`
  writes the fatal signal and the Python traceback of every thread into that
  pipe; a wrapped ``os._exit`` writes the exit status and the calling thread
  first.  When the worker dies the pipe ends (EOF); the watcher reads the
  slot, and only then imports Dask to send the scheduler a *death
  certificate* (see ``_dask/deaths.py``).  EOF with no words: the process was
  killed (SIGKILL, the OOM killer) and no call is blamed.

Why a watcher process and not a parent that forks the worker: the worker must
stay the launcher's process (an MPI rank has to be the process that called
``MPI_Init``, and worker ranks run MPI code: ``hpcfutures.mpi_task``), and
``srun`` and ``mpiexec`` tell nobody but themselves how a rank ended.

Data flow::

    worker process                               watcher process (stdlib only)
    calls.py: slot[thread] = (key, index, fn) ── shared memory ──> read after EOF
    faulthandler / os._exit hook ─────────────── pipe ───────────> why it died
    (dies) ───────────────────────────────────── EOF ────────────> certificate
                                                                   -> scheduler
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from .._support.signals import children_start_deaf_to_ctrl_c
from .watcher import EXIT_WORD, GOODBYE_WORD, HEAD, SLOT_SIZE, SLOTS

__all__ = [
    "Slot", "finished", "function_name", "goodbye", "launcher_fds", "running",
    "set_key_source", "start_watcher", "watcher_pids",
]

logger = logging.getLogger("hpcfutures")

_STATE = struct.Struct("<II")  # running, index: all a call writes


class Slot:
    """The table of running calls, shared with the watcher (one row per thread)."""

    def __init__(self, fd: int) -> None:
        os.ftruncate(fd, SLOTS * SLOT_SIZE)
        self.fd = fd
        self.memory = mmap.mmap(fd, SLOTS * SLOT_SIZE)
        self._rows: dict[int, int] = {}
        self._lock = threading.Lock()

    def row(self) -> int | None:
        """This thread's row offset, claimed on first use; None once all are taken."""
        ident = threading.get_ident()
        offset = self._rows.get(ident)
        if offset is None:
            with self._lock:
                if len(self._rows) >= SLOTS:
                    return None
                offset = self._rows.setdefault(ident, len(self._rows) * SLOT_SIZE)
        return offset

    def start_group(self, key: str, function: str) -> Callable[[int], None]:
        """Record that this thread starts a group; returns ``mark(index)`` for its calls."""
        offset = self.row()
        if offset is None:
            return _no_mark
        text = json.dumps([key, function]).encode()[: SLOT_SIZE - HEAD.size]
        memory = self.memory
        HEAD.pack_into(memory, offset, 0, 0, threading.get_ident(), len(text))
        start = offset + HEAD.size
        memory[start:start + len(text)] = text
        pack = _STATE.pack_into

        def mark(index: int) -> None:
            pack(memory, offset, 1, index)

        return mark

    def end_group(self) -> None:
        offset = self._rows.get(threading.get_ident())
        if offset is not None:
            _STATE.pack_into(self.memory, offset, 0, 0)


def _no_mark(index: int) -> None:
    return None


_slot: Slot | None = None
_pipe: int | None = None
_real_exit = os._exit
#: Where ``os._exit`` comes from (``posix``): a call that *is* ``os._exit``
#: (``submit(os._exit, 3)``) is pickled as ``posix._exit`` and found there.
_OS_MODULE: Any = sys.modules[os.name]


#: Gives the Dask key of the task this thread runs, None outside one (set by
#: ``_dask/worker.py``, the only code that may ask Dask); the watcher names the group by it.
_current_key: Callable[[], Any] | None = None


def set_key_source(source: Callable[[], Any]) -> None:
    """How to learn the running task's key (Dask's, from ``_dask``)."""
    global _current_key
    _current_key = source


def running(fn: Any) -> Callable[[int], None]:
    """Start recording a group's calls on this thread; returns ``mark(index)``,
    to be called as each call starts (a no-op outside a watched worker)."""
    slot = _slot
    if slot is None or _current_key is None:
        return _no_mark
    try:
        key = _current_key()
    except Exception:
        return _no_mark
    if key is None:  # not inside a task
        return _no_mark
    return slot.start_group(str(key), function_name(fn))


def function_name(fn: Any) -> str:
    """``module.qualname`` of a call's function, as errors name it (a callable object
    that wraps one, such as ``hpcfutures.task``'s, by the function it wraps)."""
    if getattr(fn, "__qualname__", None) is None and callable(getattr(fn, "__wrapped__", None)):
        fn = fn.__wrapped__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def finished() -> None:
    """This thread runs no call any more."""
    slot = _slot
    if slot is not None:
        slot.end_group()


def _exit_and_say(status: int) -> NoReturn:
    """``os._exit`` in a watched worker: tell the watcher the status and the thread first."""
    pipe = _pipe
    if pipe is not None:
        with contextlib.suppress(OSError):
            os.write(pipe, EXIT_WORD + f"{int(status)} {threading.get_ident()}\n".encode())
    _real_exit(status)


def _forget_in_child() -> None:
    """A task's forked child (a multiprocessing pool) neither holds the pipe open
    (the watcher would not see the worker die) nor reports as the worker."""
    global _pipe, _slot
    if _pipe is not None:
        with contextlib.suppress(OSError):
            os.close(_pipe)
    _pipe, _slot = None, None
    os._exit = _OS_MODULE._exit = _real_exit
    with contextlib.suppress(Exception):
        faulthandler.disable()


def goodbye() -> None:
    """The worker is leaving on purpose: the watcher reports nothing."""
    pipe = _pipe
    if pipe is not None:
        with contextlib.suppress(OSError):
            os.write(pipe, GOODBYE_WORD)


def launcher_fds() -> tuple[int, ...]:
    """Descriptors the watcher must hold too: the MPI rank's PMI connection.

    Hydra (MPICH's ``mpiexec``) ends every rank once one rank's PMI connection
    closes before it finalized; held by the watcher as well, the connection of
    a worker that a call crashed stays open (see :mod:`.watcher`).
    """
    fd = os.environ.get("PMI_FD")
    if fd is None or not fd.isdigit():
        return ()
    try:
        os.fstat(int(fd))
    except OSError:
        return ()
    return (int(fd),)


def _shared_memory_fd() -> int:
    """A file in shared memory, already unlinked: nothing is left behind, ever."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    try:
        fd, path = tempfile.mkstemp(prefix="hpcfutures-slot-", dir=folder)
    except OSError:
        fd, path = tempfile.mkstemp(prefix="hpcfutures-slot-")
    os.unlink(path)
    return fd


def start_watcher(report: dict[str, Any], keep_fds: tuple[int, ...] = ()) -> bool:
    """Start this worker's watcher; whether it runs.

    ``report`` says where the certificate goes: the scheduler's ``address``,
    the launch's ``credentials``, this worker's Dask ``worker`` address and
    ``who`` it is.  ``keep_fds`` are passed on to the watcher (see
    :mod:`.watcher` for the MPI case).  Best effort: a worker whose watcher
    cannot start works without one, and a crash is then reported as a lost worker.
    """
    global _slot, _pipe
    if _pipe is not None:
        return True
    try:
        slot_fd = _shared_memory_fd()
        slot = Slot(slot_fd)
        read_end, write_end = os.pipe()
        script = Path(__file__).with_name("watcher.py")
        with children_start_deaf_to_ctrl_c():  # Ctrl-C is the worker's to handle
            watcher = subprocess.Popen(
                [sys.executable, str(script)], stdin=read_end, stdout=subprocess.DEVNULL,
                pass_fds=(slot_fd, *keep_fds), close_fds=True)
    except (OSError, ValueError) as err:
        logger.debug("no watcher for this worker: %s", err)
        return False
    os.close(read_end)
    config = {**report, "pid": os.getpid(), "slot_fd": slot_fd, "sys_path": sys.path,
              "keep_fds": list(keep_fds)}
    os.write(write_end, json.dumps(config).encode() + b"\n")
    os.close(slot_fd)  # the mapping stays; the watcher has its own descriptor
    _slot, _pipe = slot, write_end
    _watchers.append(watcher)
    if keep_fds:
        _exit_instead_of_dying()
    faulthandler.enable(file=_PipeFile(write_end), all_threads=True)
    os._exit = _OS_MODULE._exit = _exit_and_say
    os.register_at_fork(after_in_child=_forget_in_child)
    return True


#: The signals faulthandler reports before the process dies of them.
FATAL_SIGNALS = ("SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL")


def _exit_instead_of_dying() -> None:
    """Make a fatal signal end the process with an exit status (the signal's number).

    MPICH's ``mpiexec`` kills every rank of the job once one rank dies *of a
    signal*, whatever happens to its PMI connection; it lets a rank that exits
    with a status go.  faulthandler, after its report, hands the signal to the
    handler that was there before it: here C's ``_exit`` itself, which takes
    the signal's number as its status (11 for SIGSEGV).  No Python runs in
    the dying process; the watcher still reports the signal.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        install = libc.signal
        install.restype, install.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p]
        bare_exit = ctypes.cast(libc._exit, ctypes.c_void_p)
    except (OSError, AttributeError):
        return
    faulthandler.disable()  # enable() then keeps _exit as the handler before it
    for name in FATAL_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            install(int(number), bare_exit)


#: Keeps each watcher's Popen alive (its own end is the pipe's EOF, not a wait).
_watchers: list[subprocess.Popen] = []


def watcher_pids() -> set[int]:
    """The process ids of this process's watchers (children that are ours, not a call's)."""
    return {watcher.pid for watcher in _watchers}


class _PipeFile:
    """What :func:`faulthandler.enable` needs: an object with ``fileno()`` (kept alive by it)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        return None
