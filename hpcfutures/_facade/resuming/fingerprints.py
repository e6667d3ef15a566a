"""What a function computes, as far as its code shows: the journal's function fingerprint.

The digest covers the function's module and qualified name; its code
(bytecode, constants, names, nested functions), its defaults and the values
in its closure; and module-level functions and simple constants (numbers,
strings, tuples of them) it names directly, followed the same way.  Two runs
of an unchanged script give the same digest, on any Python hash seed; a
change to the code, or to a constant it reads, gives a new one.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import types
from typing import Any

from ..._support.journal_files import KEY_SIZE

__all__ = ["function_digest", "pickled"]

#: Plain values a function may name from its module: their value is in its fingerprint.
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def function_digest(fn: Any) -> bytes:
    """A digest of what ``fn`` computes, as far as its code and captured values show."""
    parts: list[bytes] = []
    _describe(fn, parts, set())
    return hashlib.blake2b(b"\0".join(parts), digest_size=KEY_SIZE).digest()


def _describe(obj: Any, parts: list[bytes], seen: set[int]) -> None:
    if id(obj) in seen:
        parts.append(b"<again>")
        return
    seen.add(id(obj))
    if isinstance(obj, types.FunctionType):
        parts.append(f"fn {obj.__module__}.{obj.__qualname__}".encode())
        _describe_code(obj.__code__, parts)
        for value in (obj.__defaults__, obj.__kwdefaults__):
            parts.append(pickled(value))
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                parts.append(b"<empty>")
                continue
            _describe_value(value, parts, seen)
        _describe_globals(obj, parts, seen)
    elif isinstance(obj, functools.partial):
        parts.append(b"partial")
        _describe(obj.func, parts, seen)
        parts.append(pickled((obj.args, sorted(obj.keywords.items()))))
    elif isinstance(obj, types.MethodType):
        parts.append(b"method")
        _describe(obj.__func__, parts, seen)
        parts.append(pickled(obj.__self__))
    elif isinstance(obj, (types.BuiltinFunctionType, type)):
        parts.append(f"ref {getattr(obj, '__module__', '')}."
                     f"{getattr(obj, '__qualname__', repr(obj))}".encode())
        bound = getattr(obj, "__self__", None)
        if bound is not None and not isinstance(bound, (types.ModuleType, type)):
            parts.append(pickled(bound))  # a built-in method: its object counts (d.get)
    else:  # a callable object: its class's __call__ and its own state
        call = next((c.__dict__["__call__"] for c in type(obj).__mro__
                     if "__call__" in c.__dict__), None)
        parts.append(f"object {type(obj).__module__}.{type(obj).__qualname__}".encode())
        if isinstance(call, types.FunctionType):
            _describe(call, parts, seen)
        parts.append(pickled(obj))


def _describe_value(value: Any, parts: list[bytes], seen: set[int]) -> None:
    """A captured value: functions by what they compute, anything else as pickled."""
    if isinstance(value, (types.FunctionType, functools.partial, types.MethodType)):
        _describe(value, parts, seen)
    else:
        parts.append(pickled(value))


def _describe_globals(fn: types.FunctionType, parts: list[bytes], seen: set[int]) -> None:
    """Functions and plain constants of ``fn``'s own module that its code names."""
    module_globals = fn.__globals__
    for name in sorted(_names(fn.__code__)):
        value = module_globals.get(name)
        if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
            _describe(value, parts, seen)
        elif isinstance(value, _SIMPLE) or (
                isinstance(value, tuple) and all(isinstance(v, _SIMPLE) for v in value)):
            parts.append(f"global {name}={value!r}".encode())


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _describe_code(code: types.CodeType, parts: list[bytes]) -> None:
    """Bytecode, names and constants; not line numbers or the file's name."""
    parts.append(code.co_code)
    parts.append(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                       code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                       code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _describe_code(const, parts)
        else:
            parts.append(_canonical(const).encode())


def _canonical(const: Any) -> str:
    """A constant's text, the same in every process (frozenset order depends on hashing)."""
    if isinstance(const, frozenset):
        return "frozenset(" + ",".join(sorted(_canonical(c) for c in const)) + ")"
    if isinstance(const, tuple):
        return "(" + ",".join(_canonical(c) for c in const) + ")"
    return f"{type(const).__name__}:{const!r}"


def pickled(value: Any) -> bytes:
    """``value``'s bytes, by pickle when it can (faster), else by cloudpickle."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:
        import cloudpickle

        return cloudpickle.dumps(value, protocol=5)
