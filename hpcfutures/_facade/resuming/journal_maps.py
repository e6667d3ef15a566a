"""A journaled ``map``: its items looked up a window at a time, on a thread of their own.

::

    map(fn, items)  ──►  lookup thread: for each window of WINDOW items, in order:
                           fingerprints, places in the journal (the index's cursor)
                           the items not recorded ──feed──► MapRun (sent to the workers)
                           the window's places ──► the caller's iterator
    caller's iterator:   window by window, a recorded result unpickled from the
                         journal's map, the others from the MapRun, in order

Ten million fingerprints take the client about ten seconds; looking all of
them up before yielding anything would keep a rerun's first result waiting
that long.  Here the first window is answered within milliseconds, and the items
not recorded go to the workers as soon as their window is looked up (not
when the caller reaches them), so a half-done map keeps every worker busy.
The client holds 16 bytes per item looked up and not yet yielded, and 32 (a
key) per item sent to the workers.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..._support.journal_index import OFFSET, SHIFT, Cursor, Places
from .journal import NO_KEY, Journal

__all__ = ["MapLookup"]

#: Items looked up at a time: about 30 ms of fingerprints.
WINDOW = 1 << 15


class MapLookup:
    """One journaled map's lookups and the keys of the items it runs.

    Args:
        journal: The executor's journal.
        fn: The mapped function.
        items: Every item's arguments, in the map's order.
    """

    def __init__(self, journal: Journal, fn: Callable[..., Any], items: list[tuple]) -> None:
        self._journal = journal
        self._keys_of = journal.map_keys(fn)
        self._items: list[tuple] | None = items
        self._count = len(items)
        #: The keys of the items fed to the run, 32 bytes each, in the order fed.
        self.keys = bytearray()
        self._windows: dict[int, Places] = {}
        self._cond = threading.Condition(threading.Lock())
        self._error: BaseException | None = None
        self._stopped = False

    def start(self, feed: Callable[[list[tuple], list[int]], None], end_feed: Callable[[], None],
              found: Callable[[int], None] | None = None) -> None:
        """Look the windows up on a thread: ``feed(items, positions)`` the ones not
        recorded, ``found(n)`` counts the others, ``end_feed()`` once all are done."""
        threading.Thread(target=self._look_up, args=(feed, end_feed, found),
                         name="hpcfutures-journal-lookup", daemon=True).start()

    def _look_up(self, feed: Callable[[list[tuple], list[int]], None],
                 end_feed: Callable[[], None], found: Callable[[int], None] | None) -> None:
        items, self._items = self._items, None
        assert items is not None
        cursor = Cursor()  # this map's: other lookups meanwhile do not move it
        try:
            for number, begin in enumerate(range(0, len(items), WINDOW)):
                if self._stopped:
                    break
                window = items[begin:begin + WINDOW]
                keys = self._keys_of(window)
                starts, stops = self._journal.locate(keys, cursor)
                missing = [] if starts.count(-1) == 0 else [
                    at for at, start in enumerate(starts) if start < 0]
                if missing:
                    self.keys += b"".join([keys[at] or NO_KEY for at in missing])
                    feed([window[at] for at in missing], [begin + at for at in missing])
                if found is not None and len(missing) < len(window):
                    found(len(window) - len(missing))
                with self._cond:
                    self._windows[number] = (starts, stops)
                    self._cond.notify_all()
        except BaseException as err:  # raised to the caller at the window it stopped in
            with self._cond:
                self._error = err
                self._cond.notify_all()
        finally:
            end_feed()

    def results(self, inner: Generator[Any, None, None], end_time: float | None
                ) -> Iterator[Any]:
        """The map's results in order: recorded ones from the journal, the others
        from ``inner`` (the run of the items fed)."""
        loads, views = pickle.loads, self._journal.views()
        try:
            for number in range((self._count + WINDOW - 1) // WINDOW):
                starts, stops = self._window(number, end_time)
                if len(views) == 1:  # the hot loop, inlined; one segment: its offsets
                    view = views[0]
                    for start, stop in zip(starts, stops, strict=True):
                        yield next(inner) if start < 0 else loads(view[start:stop])
                else:
                    for start, stop in zip(starts, stops, strict=True):
                        yield next(inner) if start < 0 else loads(
                            views[start >> SHIFT][start & OFFSET:stop])
                if number % 8 == 7:  # let go of the pages read (more often costs faults)
                    self._journal.release_pages()
        finally:
            self._stopped = True
            inner.close()

    def _window(self, number: int, end_time: float | None) -> Places:
        with self._cond:
            while number not in self._windows:
                if self._error is not None:
                    raise self._error
                remaining = None if end_time is None else end_time - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"map result {number * WINDOW} not ready before the "
                                       "timeout (still looking it up in the journal)")
                self._cond.wait(remaining)
            return self._windows.pop(number)
