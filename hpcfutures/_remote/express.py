"""Small results ride with the task's end, instead of a fetch of their own.

Dask keeps a finished task's result on its worker: the client hears from the
scheduler that the task ended, then asks the worker for the value, one more
request and answer (about a third of a lone call's round trip:
benchmarks/README.md, "Round-trip latency").  A
result that pickles into at most :data:`EXPRESS_BYTES` is sent by the worker
on its stream to the scheduler just before the task's end, and the scheduler
passes it on to the client that waits for it on the stream that then tells the
end (``_dask/express.py``): the value is there when the client learns that the
task is done.  A larger one (or one with out-of-band buffers: an array's data)
is fetched the usual way, straight from the worker, so the scheduler never carries
bulk data.

Sending is the worker's business (set by ``_dask/worker.py``, the code that
may touch Dask); without a sender (outside a worker, in tests) nothing is sent.
"""

from __future__ import annotations

import io
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

__all__ = ["EXPRESS_BYTES", "GIVE_BACK_AFTER", "STREAM_AFTER", "Early", "express",
           "set_sender", "small_pickle", "stream_end", "stream_start"]

#: The largest pickled result that travels with its task's end.  A map chunk's
#: results or a bundle's outcomes are one result here; the scheduler only passes
#: the bytes on (no unpickling), so its cost is a copy and a message's share.
EXPRESS_BYTES = 32 * 1024
#: Seconds a bundle's call may run, with calls of the bundle waiting behind it,
#: before the worker gives those back (and at least ten times the mean of the
#: bundle's calls that finished): a call found slower than its bundle was sized
#: for holds up only itself, while the others go to a thread that is free.
GIVE_BACK_AFTER = 0.1
#: Seconds a group of calls runs before the outcomes of its finished calls start
#: to travel ahead of its end (then again every as many seconds while it runs).
#: A group sized by the batching engine (50 ms of work) usually ends first, so
#: nothing more is sent for it; a group held up by a slow call lets go of the
#: calls that finished before it.
STREAM_AFTER = 0.05

_send: Callable[[bytes], None] | None = None
#: For a worker thread: its task's key, sending, telling the scheduler (``set_sender``).
_bind: Callable[[], Any] | None = None


def set_sender(send: Callable[[bytes], None] | None, bind: Callable[[], Any] | None = None) -> None:
    """How this worker sends a running task's small result to its client; ``bind()``,
    called on a worker thread, returns ``(task_key, send, nudge)`` for it: ``task_key()``
    reads the key of the task it runs, ``send(key, payload)`` works from any thread, and
    ``nudge()`` tells the scheduler at once what the worker runs."""
    global _send, _bind
    _send, _bind = send, bind


class Early:
    """Outcomes of a running group's first calls, sent ahead of the group's end:
    ``outcomes[i]`` is call ``first + i``'s (a map chunk's value, or a bundle's
    ``(ok, value)``).  The group's own outcome still holds every call's.

    ``rest``, when not None: the worker gives back the group's calls from that
    index on (none of them will run here: see :class:`_Ticker`), for the client
    to send again."""

    __slots__ = ("first", "outcomes", "rest")

    def __init__(self, first: int, outcomes: list, rest: int | None = None) -> None:
        self.first = first
        self.outcomes = outcomes
        self.rest = rest

    def __reduce__(self) -> tuple[Any, tuple[int, list, int | None]]:
        return Early, (self.first, self.outcomes, self.rest)


class _TooLarge(Exception):
    """Raised inside the pickler to stop it: the result is not small."""


class _CappedFile(io.RawIOBase):
    """Keeps what is written until there is more than ``cap`` bytes, then stops the pickler."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.parts: list[bytes] = []
        self.left = cap

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data) if not isinstance(data, memoryview) else data.nbytes
        self.left -= size
        if self.left < 0:
            raise _TooLarge
        self.parts.append(bytes(data))
        return size


def _out_of_band(buffer: pickle.PickleBuffer) -> bool:
    raise _TooLarge  # an array's data: fetched from the worker, never through the scheduler


def small_pickle(value: Any, cap: int = EXPRESS_BYTES) -> bytes | None:
    """``value`` pickled, if that takes at most ``cap`` bytes and no out-of-band
    buffer; else None (stopped as soon as it is known, so a large value costs
    at most ``cap`` bytes of pickling).  A value that cannot be pickled raises."""
    file = _CappedFile(cap)
    try:
        cloudpickle.CloudPickler(file, protocol=5, buffer_callback=_out_of_band).dump(value)
    except _TooLarge:
        return None
    return b"".join(file.parts)


class _Slot:
    """A worker thread's running group: its outcomes, as the thread appends them, and
    how many were sent ahead.  One per thread, reused by each group it runs."""

    __slots__ = ("calls", "claim", "early", "expect", "flushing", "key", "nudge", "nudged",
                 "outcomes", "seen", "seen_at", "send", "sent", "started", "task_key")

    def __init__(self, task_key: Callable[[], Any], send: Callable[[Any, bytes], None],
                 nudge: Callable[[], None]) -> None:
        self.task_key = task_key
        self.send = send
        #: Tells the scheduler now what this worker runs (see _Ticker); once per group.
        self.nudge = nudge
        self.nudged = False
        #: Whether finished calls travel ahead and the scheduler is told of a long call
        #: (a small launch: the client says so with the group); whether this group's
        #: outcomes can still go ahead (not once one was too large or unpicklable).
        self.early = True
        self.flushing = True
        self.key: Any = None
        self.outcomes: list | None = None
        self.sent = 0
        self.started = 0.0
        #: A group's calls, and the counter its thread claims each call from (None: the
        #: group gives nothing back); what the ticker last saw finished, and since when.
        self.calls = 0
        self.claim: Iterator[int] | None = None
        #: Seconds a call of the group was expected to take (the client's estimate, by
        #: which it sized the group); None: not known.
        self.expect: float | None = None
        self.seen = 0
        self.seen_at = 0.0

    def give_back(self, now: float) -> None:
        """Take the calls after the running one away from the group, if that call has
        run for :data:`GIVE_BACK_AFTER` s and ten times the group's mean so far (before
        any call of it ended: ten times what the client expected a call to take; nothing
        while neither is known), and tell the client (ticker's thread).  A group of calls
        as long as the client sized it for keeps them: only a call found slower than
        that holds up no one but itself.

        The group's thread claims each call from ``claim`` before it starts it, and
        stops at a claim that is not the index it expects: the one taken here is the
        first call given back, so no call both runs here and is given back."""
        outcomes, claim = self.outcomes, self.claim
        if outcomes is None or claim is None:
            return
        done = len(outcomes)
        if done != self.seen or self.seen_at < self.started:
            self.seen, self.seen_at = done, now
            return
        mean = (self.seen_at - self.started) / done if done else self.expect
        if mean is None or done >= self.calls - 1 or (
                now - self.seen_at < max(GIVE_BACK_AFTER, 10 * mean)):
            return
        rest = next(claim)
        self.claim = None
        if rest >= self.calls or self.outcomes is not outcomes:
            return  # the group ended meanwhile
        sent, upto = self.sent, min(len(outcomes), rest)
        payload = _ahead(Early(sent, outcomes[sent:upto], rest))
        if payload is None:  # the outcomes come with the group's end; the word goes now
            payload = small_pickle(Early(sent, [], rest))
        else:
            self.sent = max(sent, upto)
        if payload is not None:
            self.send(self.key, payload)

    def flush(self) -> None:
        """Send the outcomes appended since the last flush; none more of this group
        once they cannot go ahead (too large, or unpicklable: the group's end brings
        them, or says why)."""
        outcomes, key, sent = self.outcomes, self.key, self.sent
        if outcomes is None or not self.flushing:
            return
        done = len(outcomes)  # a list's length: read atomically beside the appends
        if done <= sent:
            return
        payload = _ahead(Early(sent, outcomes[sent:done]))
        if payload is None:  # the group may still give calls back (give_back)
            self.flushing = False
            return
        if self.outcomes is outcomes:  # the group has not ended meanwhile
            self.sent = done
            self.send(key, payload)


def _ahead(early: Early) -> bytes | None:
    """``early`` pickled, if it is small and its outcomes can be pickled; else None
    (they come with the group's end, which names an outcome that cannot travel)."""
    try:
        return small_pickle(early)
    except BaseException:
        return None


class _Ticker:
    """One thread per worker process that sends the finished calls of the groups that
    have run for :data:`STREAM_AFTER` s, every half of that while any group runs, and
    sleeps on an event while none does.  It gives back a group's calls waiting
    behind a slow one (:meth:`_Slot.give_back`), and has the scheduler told of a
    group that has run :data:`GIVE_BACK_AFTER` s (once per group), so that Dask
    moves the groups queued on this worker behind it to a free one.  A group costs a
    few attribute writes on its thread's slot: a map of 10⁵ tiny calls runs some
    1,500 groups in a tenth of a second."""

    def __init__(self) -> None:
        self.slots: dict[int, _Slot] = {}
        self.busy = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def slot(self, task_key: Callable[[], Any], send: Callable[[Any, bytes], None],
             nudge: Callable[[], None]) -> _Slot:
        """A slot for the calling thread (made once per thread)."""
        slot = _Slot(task_key, send, nudge)
        with self._lock:
            self.slots[threading.get_ident()] = slot
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="hpcfutures-early-outcomes")
                self._thread.start()
        return slot

    def _run(self) -> None:
        while True:
            self.busy.wait()
            time.sleep(STREAM_AFTER / 2)
            now = time.monotonic()
            due = now - STREAM_AFTER
            running = False
            for slot in list(self.slots.values()):
                if slot.outcomes is not None:
                    running = True
                    if slot.calls > 1:
                        slot.give_back(now)
                        if slot.early and slot.started <= due:
                            slot.flush()
                    if slot.early and not slot.nudged and now - slot.started >= GIVE_BACK_AFTER:
                        slot.nudged = True
                        slot.nudge()
            if not running:
                self.busy.clear()


_ticker = _Ticker()
_thread_slot = threading.local()


def stream_start(outcomes: list, calls: int, claim: Iterator[int] | None = None,
                 early: bool = True, expect: float | None = None) -> None:
    """A group of ``calls`` calls starts on this thread: the outcomes appended to
    ``outcomes`` travel to the client ahead of the group's end once it has run for
    :data:`STREAM_AFTER` s, until :func:`stream_end` (nothing is sent for a group of
    one call, or outside a worker).  With ``claim``, the calls behind a
    slow one may be given back (``_Slot.give_back``; ``expect``: the seconds the client
    expected a call to take).  With ``early`` false (a large
    launch) nothing travels ahead and the scheduler is not told early of a long call:
    only calls may be given back."""
    if _bind is None or (not early and claim is None):
        return  # nothing to send ahead, nothing to give back: the ticker stays asleep
    slot = getattr(_thread_slot, "slot", None)
    if slot is None:
        bound = _bind()
        if bound is None:
            return
        slot = _thread_slot.slot = _ticker.slot(*bound)
    slot.key = slot.task_key()
    slot.sent = 0
    slot.started = time.monotonic()
    slot.calls, slot.claim, slot.early, slot.expect = calls, claim, early, expect
    slot.nudged, slot.flushing = False, True
    slot.outcomes = outcomes
    if not _ticker.busy.is_set():
        _ticker.busy.set()


def stream_end() -> None:
    """The group on this thread ended: nothing more of it is sent ahead."""
    slot = getattr(_thread_slot, "slot", None)
    if slot is not None:
        slot.outcomes = slot.claim = None


def express(value: Any) -> bool:
    """Send ``value`` to the client now if it is small; whether it was sent.

    Called by the task that made ``value``, just before it returns it.  A
    value that cannot be pickled raises, as Dask's own pickling would later.
    """
    send = _send
    if send is None:
        return False
    payload = small_pickle(value)
    if payload is None:
        return False
    send(payload)
    return True
