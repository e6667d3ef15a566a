"""A call's function, pickled once per batch on the client, loaded once per worker.

Dask pickles each task on its own on the way from the scheduler to a worker,
and the scheduler unpickles the client's graph first.  A function defined in
the user's script (``__main__``, which cloudpickle pickles by value, code and
all) sent as it is would be unpickled on the scheduler once per batch,
pickled there again for every task (a fraction of a millisecond each, on the
scheduler's loop: a real share of its time when a wave of deaths sends
thousands of tasks again), and unpickled again by the worker for every task.

:class:`ShippedFunction` carries the function's cloudpickled bytes instead.
The scheduler only ever sees bytes (pickling them is a copy), and a worker
loads each distinct function once, then keeps it for the next task: as a
``ProcessPoolExecutor`` worker keeps a function's module, and its globals,
between calls.  The bytes are made once per batch the client sends, so a
batch sees the function (and what it captures by value) as it was when the
batch was sent.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from .modules import pickled_by_value, to_ship
from .namespaces import shared

__all__ = ["ShippedFunction", "ship", "unship"]

#: Functions a worker keeps loaded, and the most bytes of them (a closure can hold
#: a large array: such a one is loaded for each task instead).
KEPT = 64
KEPT_BYTES = 256 * 2**20
LARGEST_KEPT = 64 * 2**20

_loaded: collections.OrderedDict[str, tuple[Callable[..., Any], int]] = collections.OrderedDict()
_loaded_bytes = 0
_lock = threading.Lock()


class ShippedFunction:
    """A function as pickled bytes, named as the function is (errors and the
    death certificates name a call's function by its module and qualified name)."""

    def __init__(self, payload: bytes, digest: str, name: str, qualname: str,
                 module: str | None) -> None:
        self.payload = payload
        self.digest = digest
        self.__name__ = name
        self.__qualname__ = qualname
        self.__module__ = module  # type: ignore[assignment]

    @classmethod
    def of(cls, fn: Callable[..., Any],
           by_value: Sequence[types.ModuleType] = ()) -> ShippedFunction:
        """``fn`` pickled now, with the modules ``by_value`` (the user's own modules the
        workers cannot import: see modules.py) pickled by value; raises what cloudpickle
        raises for an unpicklable one."""
        with pickled_by_value(by_value):
            payload = cloudpickle.dumps(fn)
        named: Any = fn  # a wrapper object (hpcfutures.task): named by the function it wraps
        wrapped = getattr(fn, "__wrapped__", None)
        if getattr(fn, "__qualname__", None) is None and callable(wrapped):
            named = wrapped
        qualname = getattr(named, "__qualname__", None) or type(named).__qualname__
        return cls(payload, hashlib.blake2b(payload, digest_size=16).hexdigest(),
                   getattr(named, "__name__", None) or qualname.rpartition(".")[2], qualname,
                   getattr(named, "__module__", None))

    def __reduce__(self) -> tuple[Any, tuple]:
        return ShippedFunction, (self.payload, self.digest, self.__name__, self.__qualname__,
                                 self.__module__)

    def load(self) -> Callable[..., Any]:
        """The function, loaded once per worker process (while it is kept)."""
        global _loaded_bytes
        with _lock:
            kept = _loaded.get(self.digest)
            if kept is not None:
                _loaded.move_to_end(self.digest)
                return kept[0]
        # Rebuilt around its module's namespace on this worker (namespaces.py).
        fn: Callable[..., Any] = shared(cloudpickle.loads(self.payload))
        size = len(self.payload)
        if size > LARGEST_KEPT:
            return fn
        with _lock:
            if self.digest not in _loaded:
                _loaded[self.digest] = (fn, size)
                _loaded_bytes += size
            while len(_loaded) > KEPT or _loaded_bytes > KEPT_BYTES:
                _, (_, dropped) = _loaded.popitem(last=False)
                _loaded_bytes -= dropped
        return fn

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<shipped {self.__module__}.{self.__qualname__}>"


def ship(fn: Callable[..., Any], owner: Any) -> Callable[..., Any]:
    """``fn`` pickled now for the launch of ``owner`` (a Dask client), with the user's
    modules that launch lacks by value; ``fn`` itself if it cannot be pickled (Dask's
    attempt then fails, with the error the caller reports)."""
    try:
        return ShippedFunction.of(fn, to_ship(owner))
    except Exception:
        return fn


def unship(fn: Any) -> Any:
    """The function itself, for a runner about to call it."""
    return fn.load() if isinstance(fn, ShippedFunction) else fn
