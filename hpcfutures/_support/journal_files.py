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
fingerprints (keys) come from :mod:`hpcfutures._facade.resuming.journal`.  Records are
found by key in :mod:`.journal_index` and written by :mod:`.journal_writer`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import mmap
import os
import struct
import zlib
from array import array
from collections import Counter
from pathlib import Path

from .journal_index import CallIndex

__all__ = [
    "KEY_SIZE",
    "SUFFIX",
    "JournalReader",
    "clear_journal",
    "encode_record",
    "journal_stats",
]

logger = logging.getLogger("hpcfutures")

SUFFIX = ".hpj"
MAGIC = b"HPJ1"
_HEADER = struct.Struct("<4sQI")
_NAME = struct.Struct("<H")
_LENGTH = struct.Struct("<Q")
KEY_SIZE = 32


def encode_record(name: str, calls: list[tuple[bytes, bytes]]) -> bytes:
    """One record's bytes: the function's name, then each call's key and pickled result."""
    label = name.encode("utf-8", "replace")[:1000]
    parts = [_NAME.pack(len(label)), label]
    pack = _LENGTH.pack
    for key, payload in calls:
        parts += (key, pack(len(payload)), payload)
    body = b"".join(parts)
    return _HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body


@dataclasses.dataclass
class Segment:
    """What reading one segment found."""

    path: Path
    size: int
    #: Offsets of its intact records, in order.
    records: array = dataclasses.field(default_factory=lambda: array("Q"))
    #: Offset of the first damaged record (a torn write), if any.
    damaged_at: int | None = None


def _segments(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []


#: Bytes of a segment read between two releases of its pages.
_RELEASE_EVERY = 64 << 20


def _release(view: mmap.mmap, start: int, end: int) -> int:
    """Let go of the pages of ``view`` from ``start`` (page-aligned) to ``end``."""
    end -= end % mmap.PAGESIZE
    with contextlib.suppress(OSError, ValueError):  # not on this system: kept
        view.madvise(mmap.MADV_DONTNEED, start, end - start)
    return end


def _scan(view: mmap.mmap, segment: Segment) -> None:
    """Find a segment's intact records: one header and one CRC (in C) each; their
    calls are read when looked up (:mod:`.journal_index`)."""
    offset, size = 0, len(view)
    memory = memoryview(view)
    unpack_header, crc32, header = _HEADER.unpack_from, zlib.crc32, _HEADER.size
    append = segment.records.append
    released = 0
    try:
        while offset < size:
            if offset - released > _RELEASE_EVERY:  # a mapped page read counts as memory
                released = _release(view, released, offset)
            body = offset + header
            if body + _NAME.size > size:
                break
            magic, length, checksum = unpack_header(view, offset)
            end = body + length
            if (magic != MAGIC or end > size or length < _NAME.size
                    or body + _NAME.size + _NAME.unpack_from(view, body)[0] > end
                    or crc32(memory[body:end]) != checksum):
                break
            append(offset)
            offset = end
    finally:
        memory.release()
    if offset < size:
        segment.damaged_at = offset


class JournalReader:
    """The records of every segment in a journal directory, found by key.

    The segments are memory-mapped: results stay on disk until asked for, and
    the index (:class:`~.journal_index.CallIndex`) holds no object per call
    unless a lookup needs the full index.
    """

    def __init__(self, directory: Path, warn: bool = True) -> None:
        self.directory = directory
        self._warn = warn
        self.segments: list[Segment] = []
        self._views: list[mmap.mmap] = []
        for path in _segments(directory):
            self._read(path)
        self.index = CallIndex(self._views, [s.records for s in self.segments])
        self.index.release()  # the scan read every page

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
        _scan(view, segment)
        if segment.damaged_at is not None and self._warn:
            logger.warning(
                "journal: %s is damaged at byte %d of %d (a write interrupted by a kill, or "
                "one still under way by another run); the calls recorded from there on run "
                "again", path, segment.damaged_at, size)

    def find(self, key: bytes) -> tuple[int, int] | None:
        """One recorded result's place (for :meth:`payload`), or None."""
        starts, stops = self.index.locate([key])
        return None if starts[0] < 0 else (starts[0], stops[0])

    def payload(self, start: int, stop: int) -> bytes:
        return self.index.payload(start, stop)

    def calls(self) -> int:
        """How many intact calls the segments hold (a call recorded twice counts twice)."""
        return sum(1 for _ in self.index.calls())

    def name_at(self, number: int, record: int) -> str:
        """The function name of the record at ``record`` of view ``number``."""
        view = self._views[number]
        body = record + _HEADER.size
        (length,) = _NAME.unpack_from(view, body)
        start = body + _NAME.size
        return bytes(view[start:start + length]).decode("utf-8", "replace")

    def close(self) -> None:
        for view in self._views:
            with contextlib.suppress(BufferError):  # a payload slice may still be alive
                view.close()
        self._views.clear()


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
        by_record: Counter = Counter()
        reader.index.build(lambda number, record: by_record.update(((number, record),)))
        functions: Counter = Counter()
        for (number, record), count in by_record.items():
            functions[reader.name_at(number, record)] += count
        return JournalStats(
            directory, len(reader.segments), sum(s.size for s in reader.segments),
            sum(by_record.values()), reader.calls(),
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
