"""The result journal on disk: a directory of append-only segment files.

::

    journal/                      one directory, on a filesystem every run sees
      <host>-<pid>-<token>.hpj    one segment per writing process, never shared
      ...

A segment is a run of records, each the results of one or more calls of one
function that arrived together (a map chunk, a single call)::

    magic "HPJ1" | body length (8 bytes) | CRC-32 of the body (4 bytes) | body
    body = name length (2 bytes) | function name (UTF-8) | call ...
    call = key (32 bytes) | result length (8 bytes) | pickled result

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
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "KEY_SIZE",
    "Entry",
    "JournalReader",
    "JournalWriter",
    "clear_journal",
    "encode_record",
    "journal_stats",
    "name_of",
    "payload_of",
]

logger = logging.getLogger("hpcfutures")

SUFFIX = ".hpj"
MAGIC = b"HPJ1"
_HEADER = struct.Struct("<4sQI")
_NAME = struct.Struct("<H")
_LENGTH = struct.Struct("<Q")
KEY_SIZE = 32
#: Seconds between two fsyncs of a segment while results keep coming.
SYNC_INTERVAL = 10.0


def encode_record(name: str, calls: list[tuple[bytes, bytes]]) -> bytes:
    """One record's bytes: the function's name, then each call's key and pickled result."""
    label = name.encode("utf-8", "replace")[:1000]
    parts = [_NAME.pack(len(label)), label]
    pack = _LENGTH.pack
    for key, payload in calls:
        parts += (key, pack(len(payload)), payload)
    body = b"".join(parts)
    return _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body


#: Where one recorded result lies: (segment map, its record's name, result start, end).
Entry = tuple[mmap.mmap, int, int, int]


def payload_of(entry: Entry) -> bytes:
    view, _, start, end = entry
    return view[start:end]


def name_of(entry: Entry) -> str:
    view, name, _, _ = entry
    (length,) = _NAME.unpack_from(view, name)
    start = name + _NAME.size
    return bytes(view[start:start + length]).decode("utf-8", "replace")


@dataclasses.dataclass
class Segment:
    """What reading one segment found."""

    path: Path
    size: int
    #: Results it holds (a call recorded twice counts twice).
    records: int = 0
    #: Offset of the first damaged record (a torn write), if any.
    damaged_at: int | None = None


def _segments(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []


def _scan(view: mmap.mmap, segment: Segment, entries: dict[bytes, Entry]) -> None:
    """Index every intact record of a segment (the first of each key wins).

    Tight loops: a rerun reads a hundred thousand results in a fraction of a second.
    """
    offset, size = 0, len(view)
    memory = memoryview(view)
    unpack_header, unpack_name, unpack_length = (
        _HEADER.unpack_from, _NAME.unpack_from, _LENGTH.unpack_from)
    header, call_header, crc32 = _HEADER.size, KEY_SIZE + _LENGTH.size, zlib.crc32
    records = 0
    try:
        while offset < size:
            body = offset + header
            if body + _NAME.size > size:
                break
            magic, length, checksum = unpack_header(view, offset)
            end = body + length
            if (magic != MAGIC or end > size or length < _NAME.size
                    or crc32(memory[body:end]) != checksum):
                break
            position = body + _NAME.size + unpack_name(view, body)[0]
            while position + call_header <= end:
                key = view[position:position + KEY_SIZE]
                start = position + call_header
                stop = start + unpack_length(view, position + KEY_SIZE)[0]
                if stop > end:
                    break
                if key not in entries:
                    entries[key] = (view, body, start, stop)
                records += 1
                position = stop
            if position != end:  # a checksum that matches a malformed record: stop trusting
                break
            offset = end
    finally:
        memory.release()
    segment.records = records
    if offset < size:
        segment.damaged_at = offset


class JournalReader:
    """The records of every segment in a journal directory, found by key.

    The segments are memory-mapped: results stay on disk until asked for.
    """

    def __init__(self, directory: Path, warn: bool = True) -> None:
        self.directory = directory
        self._warn = warn
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
        _scan(view, segment, self.entries)
        if segment.damaged_at is not None and self._warn:
            logger.warning(
                "journal: %s is damaged at byte %d of %d (a write interrupted by a kill, or "
                "one still under way by another run); the calls recorded from there on run "
                "again", path, segment.damaged_at, size)

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

    def add(self, record: bytes, calls: int = 1) -> None:
        """Queue an encoded record of ``calls`` results; written at the next flush (soon)."""
        with self._lock:
            if self._fd < 0:
                return
            self._buffer.append(record)
            self._buffered += len(record)
            self.records += calls
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
    reader = JournalReader(directory, warn=False)  # the command lists damage itself
    try:
        functions = Counter(name_of(entry) for entry in reader.entries.values())
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
