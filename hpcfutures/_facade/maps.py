"""The ``map`` family of :class:`~hpcfutures.Executor`: eager, lazy, journaled, MPI.

One method in the user's eyes, five paths inside: every item read first (the
standard library's way), read as results are taken (``buffersize``), found in
the journal, or each item an MPI task over several ranks.  They share the
executor's lock, bridge and closer, which the executor class provides.
"""

from __future__ import annotations

import itertools
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .._launch.session import Session
from .bridge import TaskBridge
from .core.arguments import plain_values, refuse_foreign_futures
from .core.closing import Closer
from .core.mapping import MapRun, Rest
from .core.progress import open_bar, progress_mode
from .mpi.mpilanes import lanes
from .mpi.mpitask import MPITask, check_launch, results_in_order
from .resuming.journal import Journal, journal_name
from .resuming.journal_maps import MapLookup

__all__ = ["MapMethods"]


class MapMethods:
    """``map`` and its paths; mixed into the executor, which provides what they share."""

    _lock: Any  # the executor's lock (a threading.Lock)
    _closer: Closer
    _session: Session

    def _usable_bridge(self) -> TaskBridge:
        raise NotImplementedError

    def _journal_now(self) -> Journal | None:
        raise NotImplementedError

    def _check_needs(self, fn: Any) -> None:
        raise NotImplementedError

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: float | None = None, chunksize: int = 1,
            buffersize: int | None = None,
            progress: bool | str | None = None) -> Iterator[Any]:
        """Like :func:`map`, run on the workers; results come back in order.

        Items are grouped into Dask tasks adaptively (see :mod:`.batching`):
        ``chunksize`` is the smallest group, and tiny tasks are batched further
        as their durations become known.  The iterator raises ``TimeoutError``
        if a result is not ready ``timeout`` s after the call, and an item's
        exception at its position.

        ``buffersize`` (as in Python 3.14, on every Python): read the items
        lazily, at most ``buffersize`` calls ahead of the last result the
        caller took, so that an endless or huge input runs in bounded memory.
        By default, as in the standard library, every item is read before the
        first call goes (the client then holds every call and, until the
        caller takes them, every result).

        ``progress`` (not in the standard library) overrides the executor's
        ``progress`` setting for this call: ``True`` draws a tqdm bar on
        stderr when it is a terminal, ``"always"`` draws it anyway, ``False``
        never.  Asking for a bar without tqdm installed raises
        :class:`~hpcfutures.MissingDependencyError`.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if not isinstance(fn, MPITask):  # a task's needs: checked once for all its calls
            self._check_needs(fn)
        if buffersize is not None:
            if not isinstance(buffersize, int):  # True is 1, False is refused: as in 3.14
                raise TypeError("buffersize must be an integer or None")
            if buffersize < 1:
                raise ValueError("buffersize must be None or > 0")
            return self._lazy_map(fn, iterables, timeout, chunksize, buffersize, progress)
        if isinstance(fn, MPITask):  # each item its own call over several ranks
            return self._mpi_map(fn, iterables, timeout, chunksize)
        mode = self._session.settings.progress if progress is None else progress_mode(progress)
        end_time = None if timeout is None else timeout + time.monotonic()
        items = _map_calls(iterables)
        with self._lock:
            bridge = self._usable_bridge()
            journal = self._journal_now()
            if journal is not None:
                tuples = list(items) if isinstance(items, Rest) else items
                return self._journaled_map(journal, bridge, fn, tuples, chunksize, mode,
                                           end_time)
            bar = None if mode == "off" else open_bar(mode, len(items), fn)
            run = MapRun(bridge, fn, items, chunksize, progress=bar).start()
            self._closer.map_runs.add(run)
        return run.results(end_time)

    def _lazy_map(self, fn: Callable[..., Any], iterables: tuple[Iterable[Any], ...],
                  timeout: float | None, chunksize: int, buffersize: int,
                  progress: bool | str | None) -> Iterator[Any]:
        """``map`` with ``buffersize``: the items are read as results are taken."""
        mode = self._session.settings.progress if progress is None else progress_mode(progress)
        end_time = None if timeout is None else timeout + time.monotonic()
        source = zip(*iterables, strict=False)
        if isinstance(fn, MPITask) or self._journal_now() is not None:
            # Each window of items is its own map, read when the one before is
            # done (an MPI task's reservation and the journal's lookup take a
            # whole list): bounded memory, at the cost of a pause between windows.
            return self._windowed_map(fn, source, end_time, chunksize, buffersize, progress)
        with self._lock:
            bridge = self._usable_bridge()
            bar = None if mode == "off" else open_bar(mode, None, fn)
            run = MapRun(bridge, fn, [], chunksize, progress=bar, source=source,
                         buffersize=buffersize).start()
            self._closer.map_runs.add(run)
        return run.results(end_time)

    def _windowed_map(self, fn: Callable[..., Any], source: Iterator[tuple[Any, ...]],
                      end_time: float | None, chunksize: int, buffersize: int,
                      progress: bool | str | None) -> Iterator[Any]:
        """``buffersize`` items at a time, each window a map of its own; the first goes
        at once, as the stdlib's first ``buffersize`` calls do, the next ones when the
        caller has taken the results before them."""
        def window_map(window: list[tuple[Any, ...]]) -> Iterator[Any]:
            left = None if end_time is None else max(end_time - time.monotonic(), 0.0)
            return self.map(fn, *zip(*window, strict=True), timeout=left,
                            chunksize=chunksize, progress=progress)

        first, error = _read_window(source, buffersize)
        started = window_map(first) if first else iter(())

        def results() -> Iterator[Any]:
            nonlocal error
            yield from started
            while error is None:
                window, error = _read_window(source, buffersize)
                if not window:
                    break
                yield from window_map(window)
            if error is not None:
                # As without a journal: every item read before the error ran, and
                # its result came first.
                raise error

        return results()

    def _mpi_map(self, task: MPITask, iterables: tuple[Iterable[Any], ...],
                 timeout: float | None, chunksize: int) -> Iterator[Any]:
        """``map`` of an MPI task: each item its own call; consecutive calls share a
        reservation of ranks (``chunksize`` calls at least, more once their pace is
        known: see mpicalls.py)."""
        end_time = None if timeout is None else timeout + time.monotonic()
        items = _argument_tuples(iterables)
        with self._lock:
            bridge = self._usable_bridge()
            if not items:  # nothing to refuse, as with each item submitted alone
                return iter(())
            for arguments in items:
                refuse_foreign_futures(arguments, {})
            workers = check_launch(self._session, task.ranks)
            self._check_needs(task)
            futures = bridge.submit_mpi(task, [(arguments, {}) for arguments in items],
                                        least=chunksize,
                                        lanes=lanes(len(items), task.ranks, workers))
        return results_in_order(futures, end_time)

    def _journaled_map(self, journal: Journal, bridge: TaskBridge, fn: Callable[..., Any],
                       items: list[tuple[Any, ...]], chunksize: int, mode: str,
                       end_time: float | None) -> Iterator[Any]:
        """``map`` where recorded items come from the journal (call with the lock held)."""
        lookup = MapLookup(journal, fn, items)
        bar = None if mode == "off" else open_bar(mode, len(items), fn)
        name = journal_name(fn)
        run = MapRun(bridge, fn, [], chunksize, progress=bar,
                     record=lambda start, values: journal.record_values(
                         lookup.keys, start, values, name),
                     positions=array("q"), fed=True).start()
        self._closer.map_runs.add(run)
        lookup.start(run.feed, run.end_feed, None if bar is None else bar.advance)
        return lookup.results(run.results(end_time), end_time)


def _map_calls(iterables: tuple[Iterable[Any], ...]) -> list[tuple[Any, ...]] | Rest:
    """Every call of an eager ``map``: the one sequence's values where they are
    plain (:class:`~.mapping.Rest`), else each call's argument tuple."""
    if len(iterables) != 1:
        return _argument_tuples(iterables)
    source = iterables[0]
    if type(source) is range:  # integers only, and immutable: used as it is
        return Rest(source)
    if type(source) is tuple:
        values: Sequence[Any] = source
    elif type(source) is list:
        values = source.copy()  # the caller may change theirs once map returns
    else:  # read in Python code, for the reason _argument_tuples gives
        values = [value for value in source]
    if plain_values(values):
        return Rest(values)
    return [(value,) for value in values]


def _argument_tuples(iterables: tuple[Iterable[Any], ...]) -> list[tuple[Any, ...]]:
    """Every call's arguments, read in a loop of Python code, not by ``list(zip(...))``.

    Inside one C call that consumes a C iterator (``itertools.count()``, a
    long ``range``) no bytecode of this frame runs, so a signal's handler
    (SIGTERM's SystemExit, Ctrl-C's KeyboardInterrupt) could run only inside
    Python code the garbage collector calls meanwhile, where its exception is
    dropped: the map would go on, and the signal be lost.  In this loop it lands
    here and ends the map.
    """
    items: list[tuple[Any, ...]] = []
    append = items.append
    for arguments in zip(*iterables, strict=False):
        append(arguments)
    return items


def _read_window(source: Iterator[tuple[Any, ...]],
                 size: int) -> tuple[list[tuple[Any, ...]], Exception | None]:
    """Up to ``size`` items of ``source``, and the exception that ended it early (the
    items read before it are kept: they are the caller's work)."""
    window: list[tuple[Any, ...]] = []
    try:
        window.extend(itertools.islice(source, size))
    except Exception as err:
        return window, err
    return window, None
