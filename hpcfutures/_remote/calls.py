"""What runs on the worker around the user's function.

Exceptions keep their own type and their remote traceback (tracebacks.py).

Whatever a call raises is that call's outcome, ``BaseException``s included:
``sys.exit()`` in a call (or while its result is pickled), a ``KeyboardInterrupt``
it raises itself, a ``GeneratorExit``.  The worker catches it, sends it back inside
an ordinary exception (Dask lets anything else out of a task end the worker's
process) and the client raises the original from the future.  (Ctrl-C reaches a
worker's main thread, never the threads that run calls.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cloudpickle

from .._errors import SerializationError
from .carried import Carried, uncarried
from .deathwatch import finished, running
from .express import express, stream_end, stream_start
from .initializer import refuse_if_failed
from .shipping import unship
from .tracebacks import _annotate, location, restore_traceback, set_location

__all__ = [
    "BundleOutcome",
    "ChunkOutcome",
    "GivenBack",
    "Rows",
    "fail_with",
    "location",
    "pick",
    "pickling_error",
    "restore_traceback",
    "run_bundle",
    "run_chunk",
    "run_chunk_task",
    "run_task",
    "set_location",
]

def run_task(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Call ``fn`` on the worker; a failure keeps its type and gains a traceback.

    Its result stays on the worker, and Dask pickles it when the client or
    another worker fetches it: it is pickled once here first, so that a
    result that cannot be (or calls ``sys.exit()`` as it is) is this call's
    exception, not the failure of a worker's connection (or its end).
    """
    refuse_if_failed()
    args, kwargs = uncarried(args, kwargs)
    running(fn)(0)
    try:
        value = unship(fn)(*args, **kwargs)
    except BaseException as exc:
        raise _annotate(exc) from None
    finally:
        finished()
    return _express_or_checked(value, "the task's result")


def _unpicklable(what: str, err: BaseException) -> BaseException:
    if isinstance(err, SystemExit):  # sys.exit() in a __reduce__: the call's own exit
        return _annotate(err)
    return _annotate(SerializationError(
        f"{what} could not be pickled to send it back to the client: "
        f"{type(err).__name__}: {err}. Return plain data (numbers, strings, "
        "arrays, dataclasses...) rather than locks, files, sockets or generators"))


class _Discard:
    """A file that forgets what is written: pickling only to see that it works."""

    def write(self, data: Any) -> int:
        return len(data)


def _forget(buffer: Any) -> None:
    """A large buffer (an array's data) goes out of band: here, nowhere, uncopied."""
    return None


def pickling_error(value: Any) -> BaseException | None:
    """Why ``value`` cannot be pickled, or None if it can (it is pickled into
    nothing, its buffers out of band: a large array is not copied to find out)."""
    try:
        cloudpickle.CloudPickler(_Discard(), protocol=5, buffer_callback=_forget).dump(value)
    except BaseException as err:
        return err
    return None


def _checked(value: Any, what: str) -> Any:
    """``value`` once it has been seen to pickle."""
    err = pickling_error(value)
    if err is not None:
        raise _unpicklable(what, err) from None
    return value


def _express_or_checked(value: Any, what: str) -> Any:
    """``value``, sent ahead to the client if small (express.py), else seen to pickle."""
    try:
        if express(value):
            return value
    except BaseException:
        pass  # cannot be pickled: _checked says why
    return _checked(value, what)


def _sent_ahead(outcome: Any) -> Any:
    """A chunk's or bundle's outcome, sent ahead to the client if small (express.py).

    Its state is packed once (and kept) whichever way it then travels.
    """
    with contextlib.suppress(Exception, SystemExit):
        express(outcome)
    return outcome


def _dumps_or_none(value: Any) -> bytes | None:
    try:
        return cloudpickle.dumps(value)
    except BaseException:
        return None


@dataclasses.dataclass
class ChunkOutcome:
    """The results of a chunk of ``map`` items, up to the first that raised.

    Pickled on the worker item by item if need be, so one unpicklable result
    becomes that item's error instead of failing the whole chunk.
    """

    values: list
    error: BaseException | None = None
    #: Seconds the chunk took on the worker: the client sizes later chunks by it.
    seconds: float = 0.0
    #: Seconds its thread sat idle before it began (None: the thread's first group).
    idle: float | None = None

    def __getstate__(self) -> dict:
        # Packed once: first to see whether it is small (express.py), then by Dask.
        state = self.__dict__.get("_state")
        if state is None:
            packed = _dumps_or_none((self.values, self.error))
            if packed is None:
                packed = cloudpickle.dumps(self._repaired())
            state = self.__dict__["_state"] = {"packed": packed, "seconds": self.seconds,
                                               "idle": self.idle}
        return state

    def __setstate__(self, state: dict) -> None:
        self.values, self.error = cloudpickle.loads(state["packed"])
        self.seconds = state["seconds"]
        self.idle = state.get("idle")

    def _repaired(self) -> tuple[list, BaseException | None]:
        for index, value in enumerate(self.values):
            try:
                cloudpickle.dumps(value)
            except BaseException as err:
                return self.values[:index], _unpicklable("a map result", err)
        error = self.error
        if error is not None and _dumps_or_none(error) is None:
            error = RuntimeError(f"{type(error).__name__}: {error} (the exception itself "
                                 "could not be pickled)")
        return self.values, error


def run_chunk(fn: Callable[..., Any], chunk: Sequence, spread: bool = True,
              early: bool = True, may_give_back: bool = True,
              expect: float | None = None) -> ChunkOutcome:
    """Call ``fn`` on each argument tuple of a ``map`` chunk, in order (with
    ``spread`` false, ``chunk`` holds each call's only argument instead).

    Stops at the first exception and returns it beside the results before it,
    so the client can yield those and raise at the right position.  The items
    behind one that runs far longer than the client expected (``expect`` s a call)
    are given back (``express.py``), unless ``may_give_back`` is false: the outcome
    then holds fewer values than items, and no error.
    """
    refuse_if_failed()
    started = time.perf_counter()
    values: list = []
    append = values.append
    mark = running(fn)  # which call runs, should one kill the worker (deathwatch.py)
    try:
        try:
            fn = unship(fn)
        except BaseException as exc:  # the first call's error: it could not run
            return ChunkOutcome(values, _annotate(exc), time.perf_counter() - started)
        claim = itertools.count()
        stream_start(values, len(chunk), claim if may_give_back else None, early, expect)
        for index, args in enumerate(chunk):
            if next(claim) != index:
                break  # the rest was given back: the client sends it again
            mark(index)
            try:
                append(fn(*args) if spread else fn(args))
            except BaseException as exc:
                return ChunkOutcome(values, _annotate(exc), time.perf_counter() - started)
    finally:
        stream_end()
        finished()
    return ChunkOutcome(values, None, time.perf_counter() - started)


class Rows:
    """A ``map`` chunk's argument tuples, in a box Dask does not open.

    Dask walks every list, tuple, set and dict among a task's arguments, on
    the client and again on the scheduler, looking for its futures: some
    microseconds per item, more than a trivial call costs to run.  A chunk
    with no future inside travels in this box instead.  The tuples of one
    chunk all have one length (one value per iterable of the ``map``); with
    one iterable the box travels as the bare values, which pickle and
    unpickle about ten times faster than as many one-element tuples (the
    chunk is pickled on the client, unpickled and pickled again on the
    scheduler, unpickled on the worker).
    """

    __slots__ = ("items", "spread")

    def __init__(self, items: Sequence, spread: bool = True) -> None:
        #: Argument tuples (``spread``), or else each call's only argument: then
        #: a slice of the map's own sequence (a ``range`` travels as three numbers).
        self.items = items
        self.spread = spread

    def __len__(self) -> int:
        return len(self.items)

    def first(self, count: int) -> Rows:
        """The first ``count`` calls, in a box of their own."""
        return Rows(self.items[:count], self.spread)

    def __iter__(self) -> Iterator[tuple]:
        """Each call's argument tuple (what a chunk sent as a list holds)."""
        return iter(self.items) if self.spread else ((value,) for value in self.items)

    def __reduce__(self) -> tuple[Any, tuple[Sequence, bool]]:
        items = self.items
        if self.spread and items and len(items[0]) == 1:
            return Rows, ([arguments[0] for arguments in items], False)
        return Rows, (items, self.spread)


def run_chunk_task(fn: Callable[..., Any], args: tuple, kwargs: dict) -> ChunkOutcome:
    """The Dask task of a ``map`` chunk: ``args`` is ``(chunk,)``, the list of
    argument tuples, or :class:`Rows` around it.

    ``kwargs`` may hold ``then``: the error of the item after the chunk (a
    chunk cut short because that item killed its worker runs again without
    it, and ends with its error; it gives nothing back); ``early``: false on a
    large launch, where the finished items do not travel ahead of the chunk's
    end (express.py); ``give_back``: false where the scheduler counts the
    chunk's calls where it ran (the end-of-run summary); and ``expect``: the seconds
    the client expects an item to take (by which it sized the chunk).
    """
    args, kwargs = uncarried(args, kwargs)
    chunk = args[0]
    idle = _idle_before()
    then = kwargs.get("then")
    try:
        early = kwargs.get("early", True)
        may = then is None and kwargs.get("give_back", True)
        expect = kwargs.get("expect")
        if isinstance(chunk, Rows):
            outcome = run_chunk(fn, chunk.items, chunk.spread, early, may, expect)
        else:
            outcome = run_chunk(fn, chunk, early=early, may_give_back=may, expect=expect)
    finally:
        _group_ended()
    outcome.idle = idle
    if outcome.error is None and then is not None:
        outcome.error = then
    return _sent_ahead(outcome)


@dataclasses.dataclass
class BundleOutcome:
    """The outcomes of several independent ``submit`` calls run as one Dask task.

    ``results[i]`` is ``(True, value)`` or ``(False, exception)``; ``seconds[i]``
    is how long call ``i`` took, which the client uses to size later bundles.
    """

    results: list
    seconds: list
    #: Seconds its thread sat idle before it began (None: the thread's first group).
    idle: float | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.get("_state")  # packed once: see ChunkOutcome
        if state is None:
            packed = _dumps_or_none(self.results)
            if packed is None:
                packed = cloudpickle.dumps([_sendable(i, r) for i, r in enumerate(self.results)])
            state = self.__dict__["_state"] = {"packed": packed, "seconds": self.seconds,
                                               "idle": self.idle}
        return state

    def __setstate__(self, state: dict) -> None:
        self.results = cloudpickle.loads(state["packed"])
        self.seconds = state["seconds"]
        self.idle = state.get("idle")


def _sendable(index: int, result: tuple[bool, Any]) -> tuple[bool, Any]:
    """``result`` if it pickles, else an error that says why it could not travel."""
    ok, value = result
    try:
        cloudpickle.dumps(value)
    except BaseException as err:
        what = "the task's result" if ok else f"the task's exception {type(value).__name__}"
        return False, _unpicklable(what, err)
    return result


def run_bundle(calls: list[tuple[Callable[..., Any], tuple, dict]] | Carried,
               may_give_back: bool = True, early: bool = True,
               expect: float | None = None) -> BundleOutcome:
    """Run ``submit`` calls one after another; each succeeds or fails on its own.

    ``calls`` comes in one :class:`~.carried.Carried` box (see sending.py), or bare.
    The calls behind one that runs far longer than the client expected (``expect``
    s a call) are given back (``express.py``), unless ``may_give_back`` is false:
    the outcome then holds fewer results than calls.
    With ``early`` false (a large launch) its finished calls do not travel ahead.
    """
    listed: list[tuple[Callable[..., Any], tuple, dict]] = (
        calls.args if isinstance(calls, Carried) else calls)
    refuse_if_failed()
    results: list = []
    seconds: list = []
    idle = _idle_before()
    mark = running(next((fn for fn, *_ in listed if fn is not fail_with), None))
    claim = itertools.count()  # the calls behind a slow one may be given back (express.py)
    stream_start(results, len(listed), claim if may_give_back else None, early, expect)
    try:
        for index, (fn, args, kwargs) in enumerate(listed):
            if next(claim) != index:
                break  # the rest was given back: the client sends it again
            mark(index)
            started = time.perf_counter()
            if fn is fail_with:  # its error already says where and why
                results.append((False, args[0]))
                seconds.append(0.0)
                continue
            try:
                results.append((True, fn(*args, **kwargs)))
            except BaseException as exc:
                results.append((False, _annotate(exc)))
            seconds.append(time.perf_counter() - started)
    finally:
        stream_end()
        finished()
        _group_ended()
    return _sent_ahead(BundleOutcome(results, seconds, idle))


#: Per worker thread: when its latest group ended (``perf_counter``).
_THREAD_MARKS = threading.local()


def _idle_before() -> float | None:
    """Seconds this worker thread sat idle since its previous group ended; None for
    its first.  The client learns from it whether the launch keeps its threads fed
    (``_facade/core/pacing.py``)."""
    ended = getattr(_THREAD_MARKS, "ended", None)
    return None if ended is None else max(0.0, time.perf_counter() - ended)


def _group_ended() -> None:
    _THREAD_MARKS.ended = time.perf_counter()


def fail_with(error: BaseException) -> Any:
    """Stands in a bundle for a call that killed its worker: the bundle runs again
    without it, and the call's place keeps its error (indices stay put)."""
    raise error


class GivenBack(Exception):
    """A call picked out of a bundle that gave it back: it ran in another bundle,
    and the call that took it as an argument is sent again with its value."""


def pick(outcome: BundleOutcome, index: int) -> Any:
    """One call's value out of a bundle (when its future becomes an argument)."""
    if index >= len(outcome.results):
        raise GivenBack(f"call {index} of its bundle was given back to run elsewhere")
    ok, value = outcome.results[index]
    if ok:  # kept on this worker for the task that takes it (see run_task)
        return _checked(value, "the task's result")
    raise value
