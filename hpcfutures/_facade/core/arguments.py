"""The one walk over a task's arguments, to find the futures among them.

``submit(f, fut)``, ``submit(f, [fut1, fut2])`` and ``submit(f, {"a": (fut,)})``
all pass futures.  Dask resolves its own futures at any depth of lists,
tuples (named ones too), sets and dicts, so the walk (``_support/walking.py``)
opens the same containers, and nothing else, for three purposes:

* refuse a future of another executor with a clear error, not a pickling error;
* tell whether a call depends on other tasks (such calls are not bundled);
* swap this executor's futures for Dask futures as the call is sent.

A container that holds no future comes back as the very same object, so the
common case (plain data) copies nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from ..._support.walking import CONTAINERS, plain, swap_within
from .futures import TaskFuture

__all__ = ["futures_in", "plain_rows", "plain_values", "refuse_foreign_futures", "swap_futures"]

_WORTH_A_LOOK = (cf.Future, *CONTAINERS)


def swap_futures(value: Any, swap: Callable[[cf.Future], Any]) -> Any:
    """``value`` with every future inside it replaced by ``swap(future)``."""
    return swap_within(value, cf.Future, swap)


def futures_in(args: tuple | list, kwargs: dict | None = None) -> list[cf.Future]:
    """Every future among ``args`` and the values of ``kwargs``, at any depth."""
    if plain(args, cf.Future) and (not kwargs or plain(kwargs, cf.Future)):
        return []  # the usual case, without setting up a walk
    found: list[cf.Future] = []

    def note(future: cf.Future) -> cf.Future:
        found.append(future)
        return future

    swap_futures(args, note)
    if kwargs:
        swap_futures(kwargs, note)
    return found


def plain_rows(rows: list[tuple]) -> bool:
    """Whether a ``map``'s argument tuples hold no future and no container.

    The check runs in C (the set of the values' classes), not in a loop of
    Python code: a ``map`` of 100,000 items would otherwise spend a tenth of
    a second in :func:`futures_in` before its first chunk goes.  A class
    whose instances may claim another class (``isinstance`` believes their
    ``__class__``: proxies, mocks) sends its map to the walk instead.
    """
    return plain_values(itertools.chain.from_iterable(rows))


def plain_values(values: Iterable[Any]) -> bool:
    """Whether ``values`` (each call's only argument) hold no future and no container
    (as :func:`plain_rows`, in C)."""
    classes = set(map(type, values))
    return not any(issubclass(cls, _WORTH_A_LOOK) or _masked(cls) for cls in classes)


def _masked(cls: type) -> bool:
    return any("__class__" in vars(base) for base in cls.__mro__[:-1])


def refuse_foreign_futures(args: tuple, kwargs: dict) -> None:
    """Raise ``TypeError`` if a future of another executor is among the arguments.

    Its value lives in another process pool (or thread); sent as it is, it
    would fail later with a pickling error that does not say what to do.
    """
    for future in futures_in(args, kwargs):
        if not isinstance(future, TaskFuture):
            raise TypeError(
                "a concurrent.futures.Future from another executor cannot be sent to the "
                "cluster; pass its .result() instead"
            )
