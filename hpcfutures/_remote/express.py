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

import contextlib
import io
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

__all__ = ["EXPRESS_BYTES", "express", "held_back", "set_sender", "small_pickle"]

#: The largest pickled result that travels with its task's end.  A map chunk's
#: results or a bundle's outcomes are one result here; the scheduler only passes
#: the bytes on (no unpickling), so its cost is a copy and a message's share.
EXPRESS_BYTES = 32 * 1024

_send: Callable[[bytes], None] | None = None
#: Per thread: whether its task's outcome goes back in an answer instead (direct calls).
_answered = threading.local()


def set_sender(send: Callable[[bytes], None] | None) -> None:
    """How this worker sends a running task's small result to its client."""
    global _send
    _send = send


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


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """Send nothing ahead from this thread meanwhile: the task's outcome goes back
    to its client in the answer to its request (``_dask/direct.py``)."""
    _answered.on = True
    try:
        yield
    finally:
        _answered.on = False


def express(value: Any) -> bool:
    """Send ``value`` to the client now if it is small; whether it was sent.

    Called by the task that made ``value``, just before it returns it.  A
    value that cannot be pickled raises, as Dask's own pickling would later.
    """
    send = _send
    if send is None or getattr(_answered, "on", False):
        return False
    payload = small_pickle(value)
    if payload is None:
        return False
    send(payload)
    return True
