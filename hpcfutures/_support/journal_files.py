"""The result journal on disk: a directory of append-only segment files.

::

    journal/                      one directory, on a filesystem every run sees
      <host>-<pid>-<token>.hpj    one segment per writing process, never shared
      ...

A segment is a run of records; each record is::

    magic "HPJ1" | body length (8 bytes) | CRC-32 of the body (4 bytes) | body
    body = key (32 bytes) | name length (2 bytes) | function name (UTF-8) | pickled result

A process only ever appends to its own segment, so two launches using one
journal at once never interleave their bytes; readers merge every segment.  A
record torn by a kill (short, or with a wrong checksum) ends the reading of
its segment: the calls it and any later record held are computed again, never
answered wrongly.  Nothing here knows about executors or functions; the
fingerprints (keys) come from :mod:`hpcfutures._facade.journal`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import mmap
import os
import secrets
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "KEY_SIZE",
    "JournalReader",
    "JournalWriter",
    "clear_journal",
    "encode_record",
    "journal_stats",
]

logger = logging.getLogger("hpcfutures")

SUFFIX = ".hpj"
MAGIC = b"HPJ1"
_HEADER = struct.Struct("<4sQI")
_NAME = struct.Struct("<H")
KEY_SIZE = 32
#: Seconds between two fsyncs of a segment while results keep coming.
SYNC_INTERVAL = 10.0


def encode_record(key: bytes, name: str, payload: bytes) -> bytes:
    """One record's bytes: header, then key, function name and pickled result."""
    label = name.encode("utf-8", "replace")[:1000]
    body = b"".join((key, _NAME.pack(len(label)), label, payload))
    return _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body


@dataclasses.dataclass
class Entry:
    """Where one recorded result lies: its segment's map and the payload's span."""

    view: mmap.mmap
    start: int
    end: int
    name: str

    def payload(self) -> bytes:
        return self.view[self.start:self.end]


@dataclasses.dataclass
class Segment:
    """What reading one segment found."""

    path: Path
    size: int
    records: int = 0
    #: Offset of the first damaged record (a torn write), if any.
    damaged_at: int | None = None


def _segments(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []


def _scan(view: mmap.mmap | bytes, segment: Segment) -> Iterator[tuple[bytes, str, int, int]]:
    """Every intact record of a segment: (key, name, payload start, payload end)."""
    offset, size = 0, len(view)
    while offset < size:
        body = offset + _HEADER.size
        if body > size:
            segment.damaged_at = offset
            return
        magic, length, checksum = _HEADER.unpack_from(view, offset)
        end = body + length
        if (magic != MAGIC or end > size or length < KEY_SIZE + _NAME.size
                or zlib.crc32(view[body:end]) != checksum):
            segment.damaged_at = offset
            return
        key = bytes(view[body:body + KEY_SIZE])
        (name_length,) = _NAME.unpack_from(view, body + KEY_SIZE)
        start = body + KEY_SIZE + _NAME.size
        name = bytes(view[start:start + name_length]).decode("utf-8", "replace")
        segment.records += 1
        yield key, name, start + name_length, end
        offset = end


class JournalReader:
    """The records of every segment in a journal directory, found by key.

    The segments are memory-mapped: results stay on disk until asked for.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[bytes, Entry] = {}
        self.segments: list[Segment] = []
        self._views: list[mmap.mmap] = []
        for path in _segments(directory):
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size == 0:
                    return
                view = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as err:
            logger.warning("journal: cannot read %s (%s); its calls run again", path, err)
            return
        self._views.append(view)
        segment = Segment(path, size)
        self.segments.append(segment)
        entries = self.entries
        for key, name, start, end in _scan(view, segment):
            if key not in entries:
                entries[key] = Entry(view, start, end, name)
        if segment.damaged_at is not None:
            logger.warning(
                "journal: %s is damaged at byte %d of %d (a write interrupted by a kill?); "
                "the calls recorded from there on run again", path, segment.damaged_at, size)

    def close(self) -> None:
        self.entries.clear()
        for view in self._views:
            with contextlib.suppress(BufferError):  # a payload slice may still be alive
                view.close()
        self._views.clear()


class JournalWriter:
    """This process's own segment: records are buffered and written in batches.

    ``record`` may be called from any thread; ``schedule`` (given a callable)
    arranges for ``flush`` to run soon, so results delivered together go out
    in one write.  A result is on disk (in the filesystem's cache, which
    survives the process being killed) once its batch is flushed; segments
    are fsynced every :data:`SYNC_INTERVAL` seconds and when closed.
    """

    def __init__(self, directory: Path, schedule: Callable[[Callable[[], None]], None]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0] or "host"
        name = f"{host}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        self.path = directory / name
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._schedule = schedule
        self._lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._scheduled = False
        self._synced = time.monotonic()
        self.written = 0
        self.records = 0
        self.failed: OSError | None = None

    def add(self, record: bytes) -> None:
        """Queue one encoded record; it is written at the next flush (soon)."""
        with self._lock:
            if self._fd < 0:
                return
            self._buffer.append(record)
            self._buffered += len(record)
            self.records += 1
            urgent = self._buffered >= 4 << 20
            schedule = not self._scheduled and not urgent
            self._scheduled = self._scheduled or schedule
        if urgent:
            self.flush()
        elif schedule:
            self._schedule(self.flush)

    def flush(self, sync: bool = False) -> None:
        with self._lock:
            self._scheduled = False
            data, self._buffer, self._buffered = b"".join(self._buffer), [], 0
            fd = self._fd
            if fd < 0:
                return
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                self.written += len(data)
                if sync or time.monotonic() - self._synced > SYNC_INTERVAL:
                    os.fsync(fd)
                    self._synced = time.monotonic()
            except OSError as err:
                if self.failed is None:
                    logger.warning("journal: cannot write to %s (%s); results from now on "
                                   "are not journaled", self.path, err)
                self.failed = err
                self._close_locked()

    def close(self) -> None:
        """Write what is buffered, fsync, close; an empty segment is removed."""
        self.flush(sync=True)
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        if not self.written:
            with contextlib.suppress(OSError):
                self.path.unlink()


# ----------------------------------------------------------------- the command
@dataclasses.dataclass
class JournalStats:
    """What ``hpcfutures journal DIR`` shows."""

    directory: Path
    segments: int
    size: int
    calls: int
    records: int
    damaged: list[tuple[Path, int]]
    functions: Counter


def journal_stats(directory: Path) -> JournalStats:
    """Count the calls a journal holds (each key once), by function name."""
    reader = JournalReader(directory)
    try:
        functions = Counter(entry.name for entry in reader.entries.values())
        return JournalStats(
            directory, len(reader.segments), sum(s.size for s in reader.segments),
            len(reader.entries), sum(s.records for s in reader.segments),
            [(s.path, s.damaged_at) for s in reader.segments if s.damaged_at is not None],
            functions)
    finally:
        reader.close()


def clear_journal(directory: Path) -> int:
    """Remove every segment of a journal; return how many there were."""
    removed = 0
    for path in _segments(directory):
        path.unlink()
        removed += 1
    return removed
