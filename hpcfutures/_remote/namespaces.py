"""One module namespace per worker for the functions that travel by value.

A function from the user's script (``__main__``) or from a module the workers
cannot import travels by value, and cloudpickle rebuilds its globals as a fresh
dictionary each time it is unpickled.  Each function would then see globals of
its own, and the idiom that works in a ``ProcessPoolExecutor`` worker (an
``initializer`` sets a module global, the calls read it) would not::

    model = None
    def init(path): global model; model = load(path)
    def predict(x): return model(x)

So on a worker, every function that came by value from module ``M`` is rebuilt
around one dictionary kept for ``M``: what an initializer or a call sets there,
later calls read.  A name the namespace already has keeps its value (as in a
forked or spawned process-pool worker, what the client changes later does not
reach it); a name it lacks is taken from the shipped function's globals, and a
function of the same module among them is rebuilt around the namespace too.
Functions of modules the worker imports are left as they are: their globals are
the module's own.
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from typing import Any

__all__ = ["shared"]

#: Module name -> the namespace this worker keeps for the functions of that module.
_spaces: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def shared(fn: Any) -> Any:
    """``fn`` rebuilt around its module's namespace on this worker, if it came by value."""
    if type(fn) is not types.FunctionType or not _by_value(fn):
        return fn
    module = fn.__module__
    with _lock:
        space = _spaces.get(module)
        if space is None:
            space = _spaces[module] = {"__name__": module, "__builtins__": builtins}
        source = fn.__globals__
        rebuilt: dict[int, types.FunctionType] = {}
        for name, value in list(source.items()):
            if name in space:
                continue
            if type(value) is types.FunctionType and value.__globals__ is source:
                value = _around(value, space, rebuilt)
            space[name] = value
        return _around(fn, space, rebuilt)


def _by_value(fn: types.FunctionType) -> bool:
    """Whether ``fn`` was rebuilt from its pickle rather than imported (its globals are
    not the dictionary of an imported module)."""
    module = sys.modules.get(fn.__module__ or "")
    return module is None or fn.__globals__ is not vars(module)


def _around(fn: types.FunctionType, space: dict[str, Any],
            rebuilt: dict[int, types.FunctionType]) -> types.FunctionType:
    """A copy of ``fn`` whose globals are ``space`` (its code, defaults, closure, name and
    attributes unchanged)."""
    done = rebuilt.get(id(fn))
    if done is not None:
        return done
    copy = types.FunctionType(fn.__code__, space, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    copy.__dict__.update(fn.__dict__)
    rebuilt[id(fn)] = copy
    return copy
