"""The result journal (``journal=PATH``): finished calls are recorded, and not run again.

::

    submit(fn, *args) / map(fn, items)      (client process only)
      -> fingerprint = hash(fn's name and code, the arguments' pickled bytes)
      -> recorded?  yes: a future done at once with the recorded result
                    no:  sent as usual; its result, when it comes back to the
                         client, is appended to this process's segment
                         (by a writer thread: _support/journal_writer.py)

A map's items are looked up window by window on a thread of their own
(:mod:`.journal_maps`), so its first result does not wait for ten million
fingerprints; the index holds little per call (_support/journal_index.py).

What a fingerprint covers: the function, as :mod:`.fingerprints` digests it
(its module and qualified name; its code, defaults and closure; module-level
functions and simple constants it names directly); and the arguments as
pickled.  What it cannot see: files the function reads, other
global state, the environment, randomness.  A call whose arguments hold a
future of this executor is keyed by that future's own fingerprint.  Exceptions
are never recorded, so failed calls run again.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import mmap
import pickle
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._errors import ConfigurationError
from ..._support.journal_files import KEY_SIZE, JournalReader, encode_record
from ..._support.journal_index import Cursor, Places
from ..._support.journal_writer import JournalWriter
from ..core.arguments import futures_in, plain_rows, swap_futures
from ..core.futures import TaskFuture, settle
from .fingerprints import function_digest, pickled

__all__ = ["NO_KEY", "Journal", "journal_name", "open_journal"]

logger = logging.getLogger("hpcfutures")

#: A map item's key slot when it has no key (never recorded, never found).
NO_KEY = bytes(KEY_SIZE)


class _FutureResult:
    """Stands for a future among the arguments: the result of the call with this key."""

    __slots__ = ("key",)

    def __init__(self, key: bytes) -> None:
        self.key = key

    def __reduce__(self) -> tuple:
        return _FutureResult, (self.key,)


class _Unkeyable(Exception):
    """A future among the arguments has no fingerprint (not journaled itself)."""


# ------------------------------------------------------------------ journal
class Journal:
    """One executor's journal: fingerprints, lookups and the records it writes.

    Args:
        directory: The journal directory (created if needed).
        schedule: Runs a callable soon on the client's loop thread (to let queued
            done-callbacks record before the journal closes).
    """

    def __init__(self, directory: Path, schedule: Callable[[Callable[[], None]], None]) -> None:
        self.directory = directory
        self._schedule = schedule
        self._writer = JournalWriter(directory)
        self._reader = JournalReader(directory)
        self._found_at_start: int | None = None
        self._digests: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.calls = 0
        self.resumed = 0
        self._warned: set[tuple[str, str]] = set()
        self.not_journaled = 0

    # ------------------------------------------------------------ fingerprints
    def _function_digest(self, fn: Any) -> bytes | None:
        """``fn``'s digest, computed once per function object; None if it has none."""
        try:
            digest = self._digests.get(fn)
        except TypeError:  # cannot be weakly referenced or hashed: no cache
            return self._new_digest(fn)
        if digest is None:
            digest = self._digests[fn] = self._new_digest(fn) or b""
        return digest or None

    def _new_digest(self, fn: Any) -> bytes | None:
        try:
            return function_digest(fn)
        except Exception as err:  # e.g. a bound method of an object that cannot be pickled
            self._not_journaled(journal_name(fn), err, "cannot be fingerprinted")
            return None

    def key(self, fn: Any, args: tuple, kwargs: dict) -> bytes | None:
        """The call's fingerprint; None if the function or arguments cannot have one."""
        return self._key_with(self._function_digest(fn), args, kwargs)

    def _key_with(self, digest: bytes | None, args: tuple, kwargs: dict) -> bytes | None:
        if digest is None:
            return None
        try:
            if futures_in(args, kwargs):
                args = swap_futures(args, self._stand_in)
                kwargs = swap_futures(kwargs, self._stand_in)
            payload = pickled((args, sorted(kwargs.items()) if kwargs else ()))
        except Exception:
            return None
        return hashlib.blake2b(digest + payload, digest_size=KEY_SIZE).digest()

    def _stand_in(self, future: Any) -> _FutureResult:
        key = self._keys.get(future)
        if key is None:
            raise _Unkeyable
        return _FutureResult(key)

    def recorded_count(self) -> int:
        """How many calls the journal holds: found at the start plus recorded since."""
        if self._found_at_start is None:  # counted when asked: a walk of every call
            with self._lock:
                self._found_at_start = self._reader.calls()
        return self._found_at_start + self._writer.records

    def recorded_now(self) -> int:
        """How many results this run recorded (a requeued sweep's progress)."""
        return self._writer.records

    # -------------------------------------------------------------- lookups
    def locate(self, keys: list[bytes | None], cursor: Cursor | None = None) -> Places:
        """Where each key's result lies (-1: not recorded); counted as calls."""
        with self._lock:
            places = self._reader.index.locate(keys, cursor)
            self.calls += len(keys)
            self.resumed += len(keys) - places[0].count(-1)
            return places

    def payload(self, start: int, stop: int) -> bytes:
        return self._reader.index.payload(start, stop)

    def release_pages(self) -> None:
        """Let go of the journal's pages read so far (see ``CallIndex.release``)."""
        self._reader.index.release()

    def views(self) -> list[mmap.mmap]:
        """The segments' maps, where :meth:`locate`'s places point."""
        return self._reader.index.views

    def submit(self, bridge: Any, fn: Callable[..., Any], args: tuple,
               kwargs: dict) -> TaskFuture:
        """``bridge.submit`` unless the call is recorded; its result recorded when it comes."""
        key = self.key(fn, args, kwargs)
        starts, stops = self.locate([key])
        if starts[0] >= 0:
            future = TaskFuture()
            settle(future, result=pickle.loads(self.payload(starts[0], stops[0])))
        else:
            future = bridge.submit(fn, args, kwargs)
            if key is not None:
                name = journal_name(fn)
                future.add_done_callback(lambda done: self._record_future(done, key, name))
        if key is not None:
            self._keys[future] = key
        return future

    def map_keys(self, fn: Callable[..., Any]) -> Callable[[list[tuple]], list[bytes | None]]:
        """A function giving a window of ``fn``'s map items their keys."""
        digest = self._function_digest(fn)

        def keys(items: list[tuple]) -> list[bytes | None]:
            plain = None if digest is None else _plain_keys(digest, items)
            if plain is None:  # futures or unpicklable values among the items: one by one
                plain = [self._key_with(digest, item, {}) for item in items]
            return plain

        return keys

    def split_map(self, fn: Callable[..., Any], items: list[tuple]
                  ) -> tuple[list[tuple[int, int] | None], list[tuple], bytearray]:
        """All at once: each item's result place or None; the items to run and their
        keys (:data:`NO_KEY` for none), as :meth:`record_values` takes them."""
        keys = self.map_keys(fn)(items)
        starts, stops = self.locate(keys)
        found = [None if start < 0 else (start, stop)
                 for start, stop in zip(starts, stops, strict=True)]
        missing = [item for item, start in zip(items, starts, strict=True) if start < 0]
        missing_keys = bytearray().join(key or NO_KEY for key, start in
                                        zip(keys, starts, strict=True) if start < 0)
        return found, missing, missing_keys

    # -------------------------------------------------------------- records
    def _record_future(self, future: Any, key: bytes, name: str) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.record(key, name, future.result())

    def record(self, key: bytes, name: str, value: Any) -> None:
        """Record one finished call's result (any thread).

        Pickled here, on the caller's thread (a done-callback on the loop):
        the future is already done, and its result, once handed to the
        user, may be changed in place.  Written by the writer thread.
        """
        payload = self._payload(name, value)
        if payload is not None:
            self._writer.add(encode_record(name, [(key, payload)]))

    def record_values(self, keys: bytes | bytearray, start: int, values: list,
                      name: str) -> threading.Event:
        """Record a map chunk's results: ``values`` of the items from ``start`` on,
        ``keys`` 32 bytes each.  They are pickled on the writer thread; the
        event is set once they are, before which the map does not yield them.
        """
        mine = bytes(keys[start * KEY_SIZE:(start + len(values)) * KEY_SIZE])
        gate = threading.Event()

        def encode() -> tuple[bytes, int]:
            calls = [(key, payload) for key, value in
                     zip(_split(mine), values, strict=False)
                     if key != NO_KEY and (payload := self._payload(name, value)) is not None]
            return (encode_record(name, calls), len(calls)) if calls else (b"", 0)

        self._writer.add(encode, gate=gate)
        return gate

    def _payload(self, name: str, value: Any) -> bytes | None:
        try:
            return pickled(value)
        except Exception as err:
            self._not_journaled(name, err)
            return None

    def _not_journaled(self, name: str, err: Exception,
                       problem: str = "has a result that cannot be pickled") -> None:
        with self._lock:
            first = (name, problem) not in self._warned
            self._warned.add((name, problem))
            if problem.startswith("has a result"):
                self.not_journaled += 1
        if first:
            logger.warning("journal: %s %s (%s: %s); its calls run as usual but are not "
                           "journaled, so a later run computes them again",
                           name, problem, type(err).__name__, err)

    def close(self) -> str:
        """Write everything out; the "resumed N of M" line for this run.

        Results are recorded by done-callbacks on the loop thread, which may
        still run after a waiter saw the last future done: what the loop has
        queued runs first.
        """
        settled = threading.Event()
        self._schedule(settled.set)
        settled.wait(5.0)
        self._writer.close()
        # The reader's maps stay open: a map's iterator may yield recorded results after
        # the ``with`` block; they close when nothing refers to them any more.
        line = (f"hpcfutures: resumed {self.resumed} of {self.calls} calls from the journal "
                f"{self.directory}; {self._writer.records} results recorded now")
        if self.not_journaled:
            line += f", {self.not_journaled} not journaled (results that cannot be pickled)"
        return line


def _plain_keys(digest: bytes, items: list[tuple]) -> list[bytes | None] | None:
    """Every item's key in one tight loop (a rerun of a 100,000-item map), when no
    item holds a future or a container that might; else None."""
    if not plain_rows(items):  # checked in C, not in a loop of Python code
        return None
    dumps, seeded = pickle.dumps, hashlib.blake2b(digest, digest_size=KEY_SIZE)
    keys: list[bytes | None] = []
    append, copy = keys.append, seeded.copy
    try:
        for item in items:  # a copy of the seeded hash costs less than a new one
            hashed = copy()
            hashed.update(dumps((item, ()), 5))
            append(hashed.digest())
    except Exception:
        return None
    return keys


def _split(keys: bytes) -> list[bytes]:
    return [keys[at:at + KEY_SIZE] for at in range(0, len(keys), KEY_SIZE)]


def journal_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}" if module else name


def open_journal(template: str, fields: dict[str, str],
                 schedule: Callable[[Callable[[], None]], None]) -> Journal:
    """Open the journal at ``template`` (expanded with ``fields``), or say why not."""
    from ..._support.config import expand_template

    directory = expand_template(template, fields, "journal")
    try:
        return Journal(directory, schedule)
    except OSError as err:
        raise ConfigurationError(
            f"cannot use the journal directory {directory}: {err.strerror or err}. "
            "Give journal= (or HPCFUTURES_JOURNAL) a directory you can write, on a "
            "filesystem that later runs see (e.g. under $HOME or your project space)"
        ) from err

