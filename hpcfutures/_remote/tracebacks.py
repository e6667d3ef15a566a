"""How an exception travels from a worker to the client, keeping its name and traceback.

Exceptions keep their own type; the formatted traceback, headed by where it
happened (rank and host), travels in the exception's ``__dict__`` (which pickle
preserves, unlike ``__cause__``) and becomes a :class:`RemoteTraceback`
``__cause__`` on the client, as with ``ProcessPoolExecutor``.  An exception
whose class the client cannot import arrives as :class:`RemoteExceptionError`
with its qualified name, message and remote traceback.  Used by every runner of
calls (calls.py) and by the initializer's report (initializer.py).
"""

from __future__ import annotations

import copyreg
import linecache
import os
import re
import socket
import traceback
from typing import Any

import cloudpickle

from .._errors import RemoteExceptionError, RemoteTraceback
from .memory import explain

__all__ = ["location", "restore_traceback", "set_location"]

_TRACEBACK_ATTR = "_hpcfutures_remote_traceback"

#: "rank 3 on node12", set once when this process becomes a worker.
_location = f"process on {socket.gethostname()}"


def set_location(text: str) -> None:
    """Name this worker in the headers of remote tracebacks."""
    global _location
    _location = text


def location() -> str:
    """This worker's name in remote tracebacks ("rank 3 (slurm) on node12")."""
    return _location


class _RaisedInTask(Exception):
    """Carries what a call raised that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``, a ``BaseException`` of the user's) back to
    the client: let out of a task, Dask would end the worker's process with it."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(original)  # args: what a pickle rebuilds it from
        self.original = original


def _annotate(exc: BaseException) -> BaseException:
    text = _format_remote(exc)
    exc = _rebuildable(explain(exc) if isinstance(exc, Exception) else _RaisedInTask(exc))
    header = f'\n"""\nTraceback from {_location}:\n'
    try:
        setattr(exc, _TRACEBACK_ATTR, f"{header}{text}\"\"\"")
    except AttributeError:  # exception types with __slots__ and no __dict__
        return exc
    return _portable(exc)


def _portable(exc: BaseException) -> BaseException:
    """``exc``, made to unpickle even where its class cannot be imported.

    Its class may live in a module only the workers have.  Sent as it is, the
    client would fail to unpickle it: the future would get a bare
    ``ModuleNotFoundError`` (the type, the message and the traceback lost), and
    Dask would log CRITICAL tracebacks.  Pickled now, the exception travels as those bytes
    beside its name, text and traceback; the client rebuilds it from the bytes,
    or else makes a :class:`~hpcfutures.RemoteExceptionError` from the rest.
    (An instance's own ``__reduce_ex__`` is what pickle asks first, before
    the class's; the bytes were made before it was set.)
    """
    kind = type(exc)
    if kind in copyreg.dispatch_table:
        # Pickled by a reducer registered for its class (tblib's, which Dask
        # installs for every exception class that exists when it is imported):
        # such a class was importable before any call ran, and pickle asks that
        # reducer before the instance.
        return exc
    try:
        payload = cloudpickle.dumps(exc)
    except Exception:  # _rebuildable made sure it pickles; nothing else to do
        return exc
    exc.__reduce_ex__ = _PortableReduce(  # type: ignore[method-assign,assignment]
        (payload, f"{kind.__module__}.{kind.__qualname__}", str(exc),
         getattr(exc, _TRACEBACK_ATTR, None)))
    return exc


class _PortableReduce:
    """An exception's own ``__reduce_ex__``: rebuilt on the client by :func:`_rebuild`."""

    __slots__ = ("described",)

    def __init__(self, described: tuple[bytes, str, str, str | None]) -> None:
        self.described = described

    def __call__(self, protocol: int) -> tuple[Any, tuple]:
        return _rebuild, self.described


def _rebuild(payload: bytes, type_name: str, message: str,
             traceback_text: str | None) -> BaseException:
    """On the client: a call's exception, or what stands in for it (see :func:`_portable`)."""
    try:
        exc: BaseException = cloudpickle.loads(payload)
    except Exception as err:
        module = type_name.rpartition(".")[0]
        exc = RemoteExceptionError(
            f"{type_name}: {message} (the call raised this exception on its worker; it could "
            f"not be rebuilt here, where the client runs: {type(err).__name__}: {err}. Make "
            f"the module {module!r} importable here to get the exception as itself)",
            type_name, message)
        if traceback_text is not None:
            setattr(exc, _TRACEBACK_ATTR, traceback_text)
    return exc


#: cloudpickle's file name for the code of functions it sent by value (the script's own).
_DYNAMIC_CODE = "<dynamic-code>"
_DYNAMIC_FRAME = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (.+)$', re.M)
#: This package's directory: the frames that called the user's function start here.
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _format_remote(exc: BaseException) -> str:
    """The traceback the user reads: from the user's function down, their file and line.

    hpcfutures' own frames that called the function are left out.  Functions
    defined in the user's script travel by value, and cloudpickle names their
    file ``<dynamic-code>``; their globals still hold the script's ``__file__``,
    which names it again (with the source line, where the worker can read it).
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_HERE):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    files = _dynamic_code_files(exc)
    if not files:
        return text

    def named(match: re.Match[str]) -> str:
        indent, line, function = match.group(1), int(match.group(2)), match.group(3)
        path = files.get((function, line))
        if path is None:
            return match.group(0)
        source = linecache.getline(path, line).strip()
        frame = f'{indent}File "{path}", line {line}, in {function}'
        return f"{frame}\n{indent}  {source}" if source else frame

    return _DYNAMIC_FRAME.sub(named, text)


def _dynamic_code_files(exc: BaseException) -> dict[tuple[str, int], str]:
    """(function, line) -> the script's file, for frames of code sent by value."""
    files: dict[tuple[str, int], str] = {}
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for frame, line in traceback.walk_tb(current.__traceback__):
            path = frame.f_globals.get("__file__")
            if frame.f_code.co_filename == _DYNAMIC_CODE and isinstance(path, str):
                files[(frame.f_code.co_name, line)] = path
        pending += [current.__cause__, current.__context__]
    return files


def _rebuildable(exc: BaseException) -> BaseException:
    """``exc``, or a RuntimeError with its text if it cannot survive a pickle round trip.

    An exception whose class cannot be rebuilt from its pickle (a custom
    ``__init__`` with required arguments, an unusual ``__new__``) would
    otherwise fail on the client while results are unpacked, taking the
    results that travelled with it down too.
    """
    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception as err:
        return RuntimeError(
            f"{type(exc).__qualname__}: {exc} (the task raised this exception, but it could "
            f"not be sent back to the client as itself: {type(err).__name__}: {err})")
    return exc


def restore_traceback(exc: BaseException) -> BaseException:
    """On the client: attach the worker's traceback as ``__cause__``.

    Dask pickles exceptions with their traceback (tblib): those worker frames
    are the ones in the attached text, and would be printed a second time
    below the client's own frames, so they are dropped.
    """
    text = getattr(exc, _TRACEBACK_ATTR, None)
    if isinstance(exc, _RaisedInTask):
        exc = exc.original
        if isinstance(exc, SystemExit) and exc.code is None and exc.args:
            # Rebuilt without its __init__ (tblib's pickling, which Dask installs),
            # a SystemExit has lost the code its __init__ derives from its args.
            exc.code = exc.args[0] if len(exc.args) == 1 else str(exc.args)
    if text is not None:
        exc.__traceback__ = None
        exc.__cause__ = RemoteTraceback(text)
        try:
            delattr(exc, _TRACEBACK_ATTR)
        except AttributeError:
            pass
    return exc
