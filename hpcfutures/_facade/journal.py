"""The result journal (``journal=PATH``): finished calls are recorded, and not run again.

::

    submit(fn, *args) / map(fn, items)      (client process only)
      -> fingerprint = hash(fn's name and code, the arguments' pickled bytes)
      -> recorded?  yes: a future done at once with the recorded result
                    no:  sent as usual; its result, when it comes back to the
                         client, is appended to this process's segment
                         (batched per loop iteration: _support/journal_files.py)

What a fingerprint covers: the function, as :mod:`.fingerprints` digests it
(its module and qualified name; its code, defaults and closure; module-level
functions and simple constants it names directly); and the arguments as
pickled.  What it cannot see: files the function reads, other
global state, the environment, randomness.  A call whose arguments hold a
future of this executor is keyed by that future's own fingerprint.  Exceptions
are never recorded, so failed calls run again.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import logging
import pickle
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .._support.journal_files import (
    KEY_SIZE,
    Entry,
    JournalReader,
    JournalWriter,
    encode_record,
    payload_of,
)
from .arguments import futures_in, swap_futures
from .fingerprints import function_digest, pickled
from .futures import TaskFuture, settle

__all__ = ["Journal", "journal_name", "open_journal", "resumed_results"]

logger = logging.getLogger("hpcfutures")

#: Values among map items that may hold a future (then keyed one by one).
_MAY_HOLD_FUTURES = (cf.Future, list, tuple, set, dict)


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
        schedule: Runs a callable soon on the client's loop thread (batched writes).
    """

    def __init__(self, directory: Path, schedule: Callable[[Callable[[], None]], None]) -> None:
        self.directory = directory
        self._schedule = schedule
        self._writer = JournalWriter(directory, schedule)
        self._reader = JournalReader(directory)
        self._found_at_start = len(self._reader.entries)
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
        return self._found_at_start + self._writer.records

    def recorded_now(self) -> int:
        """How many results this run recorded (a requeued sweep's progress)."""
        return self._writer.records

    # -------------------------------------------------------------- lookups
    def _found(self, key: bytes | None) -> Entry | None:
        with self._lock:
            self.calls += 1
            entry = None if key is None else self._reader.entries.get(key)
            if entry is not None:
                self.resumed += 1
            return entry

    def submit(self, bridge: Any, fn: Callable[..., Any], args: tuple,
               kwargs: dict) -> TaskFuture:
        """``bridge.submit`` unless the call is recorded; its result recorded when it comes."""
        key = self.key(fn, args, kwargs)
        entry = self._found(key)
        if entry is not None:
            future = TaskFuture()
            settle(future, result=pickle.loads(payload_of(entry)))
        else:
            future = bridge.submit(fn, args, kwargs)
            if key is not None:
                name = journal_name(fn)
                future.add_done_callback(lambda done: self._record_future(done, key, name))
        if key is not None:
            self._keys[future] = key
        return future

    def split_map(self, fn: Callable[..., Any], items: list[tuple]
                  ) -> tuple[list[Entry | None], list[tuple], list[bytes | None]]:
        """For each item its recorded entry or None; the items to run and their keys."""
        digest = self._function_digest(fn)
        keys = None if digest is None else _plain_keys(digest, items)
        if keys is None:  # futures or unpicklable values among the items: one by one
            keys = [self._key_with(digest, item, {}) for item in items]
        entries = self._reader.entries
        found = [None if key is None else entries.get(key) for key in keys]
        missing = [item for item, entry in zip(items, found, strict=True) if entry is None]
        missing_keys = [key for key, entry in zip(keys, found, strict=True) if entry is None]
        with self._lock:
            self.calls += len(items)
            self.resumed += len(items) - len(missing)
        return found, missing, missing_keys

    # -------------------------------------------------------------- records
    def _record_future(self, future: Any, key: bytes, name: str) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.record(key, name, future.result())

    def record(self, key: bytes, name: str, value: Any) -> None:
        """Record one finished call's result (any thread)."""
        payload = self._payload(name, value)
        if payload is not None:
            self._writer.add(encode_record(name, [(key, payload)]))

    def record_values(self, keys: list[bytes | None], start: int, values: list,
                      name: str) -> None:
        """Record a map chunk's results: ``values`` of the items from ``start`` on."""
        calls = [(key, payload) for key, value in
                 zip(keys[start:start + len(values)], values, strict=False)
                 if key is not None and (payload := self._payload(name, value)) is not None]
        if calls:
            self._writer.add(encode_record(name, calls), calls=len(calls))

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
        self._reader.entries = {}
        line = (f"hpcfutures: resumed {self.resumed} of {self.calls} calls from the journal "
                f"{self.directory}; {self._writer.records} results recorded now")
        if self.not_journaled:
            line += f", {self.not_journaled} not journaled (results that cannot be pickled)"
        return line


def _plain_keys(digest: bytes, items: list[tuple]) -> list[bytes | None] | None:
    """Every item's key in one tight loop (a rerun of a 100,000-item map), when no
    item holds a future or a container that might; else None."""
    if any(isinstance(value, _MAY_HOLD_FUTURES) for item in items for value in item):
        return None
    dumps, seeded = pickle.dumps, hashlib.blake2b(digest, digest_size=KEY_SIZE)
    keys: list[bytes | None] = []
    append = keys.append
    try:
        for item in items:  # a copy of the seeded hash costs less than a new one
            hashed = seeded.copy()
            hashed.update(dumps((item, ()), 5))
            append(hashed.digest())
    except Exception:
        return None
    return keys


def resumed_results(found: list[Entry | None],
                    inner: Generator[Any, None, None] | None) -> Iterator[Any]:
    """A map's results in order: recorded ones from the journal, the others as they come."""
    try:
        for entry in found:
            if entry is None:
                assert inner is not None
                yield next(inner)
            else:
                yield pickle.loads(payload_of(entry))
    finally:
        if inner is not None:
            inner.close()


def journal_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}" if module else name


def open_journal(template: str, fields: dict[str, str],
                 schedule: Callable[[Callable[[], None]], None]) -> Journal:
    """Open the journal at ``template`` (expanded with ``fields``), or say why not."""
    from .._support.config import expand_template

    directory = expand_template(template, fields, "journal")
    try:
        return Journal(directory, schedule)
    except OSError as err:
        raise ConfigurationError(
            f"cannot use the journal directory {directory}: {err.strerror or err}. "
            "Give journal= (or HPCFUTURES_JOURNAL) a directory you can write, on a "
            "filesystem that later runs see (e.g. under $HOME or your project space)"
        ) from err

