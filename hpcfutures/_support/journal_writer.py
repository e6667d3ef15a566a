"""This process's own journal segment, written by a thread of its own.

::

    client's event loop (done-callbacks)          writer thread
      add(record or encode, gate) ──queue──►  encode (pickle) each, open its gate
                                              one write of all that was queued
                                              fsync every SYNC_INTERVAL s, and at close

Results arrive on the client's event loop; pickling them, writing and
fsyncing there would let a disk's latency or a large result hold up every
other completion.  Here the loop only queues: whatever is queued while the
thread writes goes out in its next single write (as the results of one turn
of the loop would).  A map's chunk carries a *gate*, opened once
its results are pickled: the map's caller is handed a result only after that,
so a result changed in place by the caller is recorded as the function
returned it.

Guarantees kept: a result is in the filesystem's cache (which survives the
process being killed) soon after it arrives; the segment is fsynced at least
every :data:`SYNC_INTERVAL` seconds while results come and when closed, so
by :meth:`JournalWriter.close` every result is durable; a torn write is
caught by the record's CRC when read (:mod:`.journal_files`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .journal_files import SUFFIX

__all__ = ["SYNC_INTERVAL", "JournalWriter"]

logger = logging.getLogger("hpcfutures")

#: Seconds between two fsyncs of a segment while results keep coming.
SYNC_INTERVAL = 10.0
#: Seconds ``close`` waits for the thread to write what is queued.
CLOSE_TIMEOUT = 300.0

#: A record's bytes, or a callable that makes them off the loop: (bytes, results).
Job = bytes | Callable[[], tuple[bytes, int]]


class JournalWriter:
    """Appends records to this process's segment from a thread; ``add`` from any thread."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0] or "host"
        name = f"{host}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        self.path = directory / name
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[tuple[Job, int, threading.Event | None]] = []
        self._closing = False
        self._thread: threading.Thread | None = None
        self._synced = time.monotonic()
        self._unsynced = False
        #: Bytes written, and results recorded (known once their record is encoded).
        self.written = 0
        self.records = 0
        self.failed: OSError | None = None

    def add(self, job: Job, calls: int = 1, gate: threading.Event | None = None) -> None:
        """Queue a record (its bytes, or a callable that makes them); ``gate`` is set
        once it is encoded, or at once if nothing more is written."""
        with self._cond:
            if not self._closing:
                self._queue.append((job, calls, gate))
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="hpcfutures-journal", daemon=True)
                    self._thread.start()
                self._cond.notify()
                return
        if gate is not None:
            gate.set()

    def close(self) -> None:
        """Write what is queued, fsync, close; an empty segment is removed."""
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify()
        if thread is None:
            self._finish()
            return
        thread.join(CLOSE_TIMEOUT)
        if thread.is_alive():
            logger.warning("journal: %s is still being written after %g s; results recorded "
                           "since may be lost if the process ends now", self.path,
                           CLOSE_TIMEOUT)

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._queue and not self._closing:
                        self._cond.wait(SYNC_INTERVAL)
                    jobs, self._queue = self._queue, []
                    closing = self._closing
                self._write(self._encode(jobs), sync=closing)
                if closing:
                    break
        finally:
            self._finish()

    def _encode(self, jobs: list[tuple[Job, int, threading.Event | None]]) -> bytes:
        parts = []
        try:
            for job, calls, gate in jobs if self._fd >= 0 else ():
                try:
                    if callable(job):
                        job, calls = job()
                    if job:
                        parts.append(job)
                        self.records += calls
                except Exception:  # a bug: its results are not recorded, the rest are
                    logger.exception("journal: a record could not be encoded")
                finally:
                    if gate is not None:
                        gate.set()
        finally:
            for _, _, gate in jobs:  # never leave a map's caller waiting
                if gate is not None:
                    gate.set()
        return b"".join(parts)

    def _write(self, data: bytes, sync: bool) -> None:
        if self._fd < 0:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self.written += len(data)
            self._unsynced = self._unsynced or bool(data)
            if self._unsynced and (sync or time.monotonic() - self._synced > SYNC_INTERVAL):
                os.fsync(self._fd)
                self._synced, self._unsynced = time.monotonic(), False
        except OSError as err:
            if self.failed is None:
                logger.warning("journal: cannot write to %s (%s); results from now on "
                               "are not journaled", self.path, err)
            self.failed = err
            self._finish()

    def _finish(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            if self._unsynced:
                os.fsync(self._fd)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        if not self.written:
            with contextlib.suppress(OSError):
                self.path.unlink()
