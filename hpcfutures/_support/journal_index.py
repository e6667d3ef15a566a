"""Where each recorded call lies in a journal's segments, found by key in little memory.

A journal of 10⁷ results indexed as ``dict[key bytes, tuple]`` would take
gigabytes, and many seconds to build before a rerun's first lookup.  Nothing
here holds an object per call until it has to:

1. **Records.**  Opening the journal reads each segment record by record
   (header and CRC, in C), keeping each record's offset in an ``array``
   (8 bytes a record).
2. **The cursor.**  A rerun looks its calls up in map order, and a map's
   results were recorded in map order within each chunk: the call after the
   last one found is tried first (one comparison), then the first calls of
   records (a dict built on the first miss: one entry a record, few for a
   map's chunks).  A rerun of the same map rarely needs more.
3. **A search** of the segments' bytes (``mmap.find``, in C) for a key
   inside a record: a call recorded twice (computed again by a later run)
   leads the cursor to one copy while the next key follows the other.
4. **The full index**, built after a few searches (a key
   that is not recorded, a single ``submit``, a map over other items): the
   first calls' dict, grown to every call, from the key's first 60 bits (an
   int) to the call's packed place (an int): about 100 bytes a call instead
   of 250; a key that shares those bits with another (a chance of 1 in
   20,000 that any two do, at 10⁷ calls) goes into a small dict of full keys.

A call's place is packed in one int, ``view number << 40 | offset``: segments
stay under a terabyte.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import struct
from array import array
from collections.abc import Callable, Iterator

__all__ = ["OFFSET", "SHIFT", "CallIndex", "Cursor", "Places"]

_HEADER = struct.Struct("<4sQI")
_NAME = struct.Struct("<H")
#: A call's header: its key and its result's length.
_CALL = struct.Struct("<32sQ")
_PREFIX = struct.Struct("<Q")
SHIFT = 40
OFFSET = (1 << SHIFT) - 1
#: Keys searched for in the segments' bytes before the full index is built.
SEARCHES = 8

#: Where a window of calls' results lie: packed payload start (-1: not
#: recorded) and payload end, one of each per call.
Places = tuple[array, array]


class Cursor:
    """Where the next key is expected: the call after the last one found (view
    number, call offset, its record's end; offset -1: nowhere)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = (0, -1, -1)


class CallIndex:
    """Calls of intact records, by key; the segments' maps must stay open.

    Args:
        views: The segments' memory maps, in the order duplicates are resolved.
        records: For each view, the offsets of its intact records (checked).
    """

    def __init__(self, views: list[mmap.mmap], records: list[array]) -> None:
        self.views = views
        self._records = records
        #: Each record's first call by key prefix (built on the cursor's first miss).
        self._firsts: dict[int, int] | None = None
        #: Every call by key prefix (built on the first key the records do not have).
        self._full: dict[int, int] | None = None
        self._collisions: dict[bytes, int] = {}
        #: Searches done for keys inside records (then the full index is built).
        self._searches = 0
        self._cursor = Cursor()

    # ------------------------------------------------------------------ lookups
    def locate(self, keys: list[bytes | None], cursor: Cursor | None = None) -> Places:
        """Each key's result place, in one loop: the cursor, the records, the index.

        ``cursor``: the caller's own (a map's), so that lookups of other callers
        in between do not move it; by default the index's.
        """
        cursor = self._cursor if cursor is None else cursor
        starts, stops = array("q", [0]) * len(keys), array("q", [0]) * len(keys)
        views, unpack = self.views, _CALL.unpack_from
        number, call, end = cursor.at
        view = views[number] if call >= 0 else None
        for place, key in enumerate(keys):
            if key is None:
                starts[place] = -1
                continue
            if view is not None and call + 40 <= end:
                found, length = unpack(view, call)
                if found == key:
                    start = call + 40
                    stop = start + length
                    if stop <= end:
                        starts[place], stops[place] = number << SHIFT | start, stop
                        call = stop
                        if call == end:
                            number, call, end = self._next_record(number, end)
                            view = views[number] if call >= 0 else None
                        continue
            where = self._first(key) or self._search(key)
            if where is None:
                starts[place] = -1
                continue
            number, call = where
            view = views[number]
            end = self._end_of(number, call)
            start = call + 40
            stop = start + unpack(view, call)[1]
            if stop > end:  # a malformed record that passed its CRC: not trusted
                starts[place], view = -1, None
                continue
            starts[place], stops[place] = number << SHIFT | start, stop
            call = stop
            if call == end:
                number, call, end = self._next_record(number, end)
                view = views[number] if call >= 0 else None
        cursor.at = (number, call, end)
        return starts, stops

    def payload(self, start: int, stop: int) -> bytes:
        """A located result's pickled bytes (``start`` as :meth:`locate` packs it)."""
        return self.views[start >> SHIFT][start & OFFSET:stop]

    def release(self) -> None:
        """Let go of the pages of the segments read so far (they stay in the page
        cache): a rerun reads the whole journal, and mapped pages it touched
        would otherwise count in the process's memory, as much as the journal."""
        for view in self.views:
            with contextlib.suppress(OSError, ValueError):  # closed, or not on this system
                view.madvise(mmap.MADV_DONTNEED)

    def _next_record(self, number: int, end: int) -> tuple[int, int, int]:
        """The first call of the record at ``end``, if intact; else no cursor."""
        offsets = self._records[number]
        if not offsets or end > offsets[-1]:
            return 0, -1, -1
        call, stop = _calls_of(self.views[number], end)
        return number, call, stop

    def _end_of(self, number: int, call: int) -> int:
        offsets = self._records[number]
        record = offsets[bisect.bisect_right(offsets, call) - 1]
        return _calls_of(self.views[number], record)[1]

    def _first(self, key: bytes) -> tuple[int, int] | None:
        """The call with ``key`` if it is the first of its record."""
        if self._firsts is None:
            self._firsts = {}
            setdefault, prefix_of = self._firsts.setdefault, _PREFIX.unpack_from
            for number, (view, offsets) in enumerate(zip(self.views, self._records,
                                                         strict=True)):
                for record in offsets:
                    call, end = _calls_of(view, record)
                    if call + 40 <= end:
                        setdefault(prefix_of(view, call)[0] >> 4, number << SHIFT | call)
        packed = self._firsts.get(_PREFIX.unpack_from(key)[0] >> 4)
        if packed is None or self._key_at(packed) != key:
            return None  # not a first call (or a prefix two records share: the full index)
        return packed >> SHIFT, packed & OFFSET

    def _search(self, key: bytes) -> tuple[int, int] | None:
        """A key neither the cursor nor a record's start has: searched for in the
        segments' bytes (in C) the first few times, then found in the full index.

        A call recorded twice (a run that computed it again) sends the cursor to
        one copy while the next key follows the other: the search finds it, and
        the cursor follows from there, without an index of every call.
        """
        if self._full is not None or self._searches >= SEARCHES:
            return self._find(key)
        self._searches += 1
        try:
            for number, (view, offsets) in enumerate(zip(self.views, self._records,
                                                         strict=True)):
                if not offsets:
                    continue
                limit = _calls_of(view, offsets[-1])[1]
                at = view.find(key, 0, limit)
                while at >= 0:
                    if self._is_call(number, at):
                        return number, at
                    at = view.find(key, at + 1, limit)  # inside a result: not a key
            return None
        finally:
            self.release()  # the search read every page

    def _is_call(self, number: int, at: int) -> bool:
        """Whether a call starts at ``at`` (walked from its record's start)."""
        view, offsets = self.views[number], self._records[number]
        call, end = _calls_of(view, offsets[bisect.bisect_right(offsets, at) - 1])
        length_of = _CALL.unpack_from
        while call < at and call + 40 <= end:
            call += 40 + length_of(view, call)[1]
        return call == at and call + 40 + length_of(view, call)[1] <= end

    def _find(self, key: bytes) -> tuple[int, int] | None:
        if self._full is None:
            self.build()
            assert self._full is not None
        packed = self._full.get(_PREFIX.unpack_from(key)[0] >> 4)
        if packed is not None and self._key_at(packed) != key:
            packed = self._collisions.get(key)
        return None if packed is None else (packed >> SHIFT, packed & OFFSET)

    def _key_at(self, packed: int) -> bytes:
        call = packed & OFFSET
        return self.views[packed >> SHIFT][call:call + 32]

    # ------------------------------------------------------------- full index
    def build(self, counted: Callable[[int, int], None] | None = None) -> None:
        """Index every call by key prefix (the first of each key wins); ``counted(view
        number, record offset)`` is told of each key's first call."""
        # The first calls' dict grows into the full index: one entry a call, not two.
        full: dict[int, int] = {} if self._firsts is None else self._firsts
        self._collisions = {}
        setdefault, prefix_of, views = full.setdefault, _PREFIX.unpack_from, self.views
        for number, record, call in self.calls():
            packed = number << SHIFT | call
            first = setdefault(prefix_of(views[number], call)[0] >> 4, packed)
            if first != packed:
                key = self._key_at(packed)
                if self._key_at(first) == key or key in self._collisions:
                    continue  # recorded twice: the first is kept
                self._collisions[key] = packed
            if counted is not None:
                counted(number, record)
        self._full = self._firsts = full

    def calls(self) -> Iterator[tuple[int, int, int]]:
        """Every intact call, as (view number, record offset, call offset), in order."""
        unpack = _CALL.unpack_from
        for number, (view, offsets) in enumerate(zip(self.views, self._records, strict=True)):
            for record in offsets:
                call, end = _calls_of(view, record)
                while call + 40 <= end:
                    stop = call + 40 + unpack(view, call)[1]
                    if stop > end:
                        break
                    yield number, record, call
                    call = stop


def _calls_of(view: mmap.mmap, record: int) -> tuple[int, int]:
    """The first call's offset and the end of the record at ``record``."""
    body = record + _HEADER.size
    end = body + _HEADER.unpack_from(view, record)[1]
    return body + _NAME.size + _NAME.unpack_from(view, body)[0], end
