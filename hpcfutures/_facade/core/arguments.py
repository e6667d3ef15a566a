"""The one walk over a task's arguments, to find the futures among them.

``submit(f, fut)``, ``submit(f, [fut1, fut2])`` and ``submit(f, {"a": (fut,)})``
all pass futures.  Dask resolves its own futures at any depth of lists,
tuples (named ones too), sets and dicts, so this walk opens the same
containers, and nothing else, for three purposes:

* refuse a future of another executor with a clear error, not a pickling error;
* tell whether a call depends on other tasks (such calls are not bundled);
* swap this executor's futures for Dask futures as the call is sent.

A container that holds no future comes back as the very same object, so the
common case (plain data) copies nothing.  A container met again inside itself
is left alone rather than walked forever.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Callable, Iterable
from typing import Any, cast

from .futures import TaskFuture

__all__ = ["futures_in", "plain_rows", "plain_values", "refuse_foreign_futures", "swap_futures"]

#: What Dask opens to resolve its futures (``dask._task_spec.parse_input``).
_CONTAINERS = (list, tuple, set, dict)
_WORTH_A_LOOK = (cf.Future, *_CONTAINERS)


def swap_futures(value: Any, swap: Callable[[cf.Future], Any]) -> Any:
    """``value`` with every future inside it replaced by ``swap(future)``."""
    if isinstance(value, cf.Future):
        return swap(value)
    if not isinstance(value, _CONTAINERS) or _plain(value):
        return value
    return _walk(value, swap, set())


def _plain(container: Any) -> bool:
    """No future and no container inside: the usual case, settled in one pass."""
    for item in container.values() if isinstance(container, dict) else container:
        if isinstance(item, _WORTH_A_LOOK):
            return False
    return True


def _walk(container: Any, swap: Callable[[cf.Future], Any], path: set[int]) -> Any:
    if id(container) in path:
        return container
    path.add(id(container))
    try:
        changes = _changes(container, swap, path)
    finally:
        path.discard(id(container))
    return _rebuilt(container, changes) if changes else container


def _changes(container: Any, swap: Callable[[cf.Future], Any], path: set[int]) -> dict:
    """What changes in ``container``: by key for a dict, else by position."""
    changes = {}
    places = container.items() if isinstance(container, dict) else enumerate(container)
    for place, item in places:
        if isinstance(item, cf.Future):
            new = swap(item)
        elif isinstance(item, _CONTAINERS) and not _plain(item):
            new = _walk(item, swap, path)
        else:
            continue
        if new is not item:
            changes[place] = new
    return changes


def _rebuilt(container: Any, changes: dict) -> Any:
    """A container like ``container`` with ``changes``: the types Dask rebuilds too."""
    if isinstance(container, dict):
        return {**container, **changes}
    items = list(container)
    for index, new in changes.items():
        items[index] = new
    if isinstance(container, tuple):
        if hasattr(container, "_fields"):  # a named tuple
            return cast(Any, container)._make(items)
        return tuple(items)
    return set(items) if isinstance(container, set) else items


def futures_in(args: tuple | list, kwargs: dict | None = None) -> list[cf.Future]:
    """Every future among ``args`` and the values of ``kwargs``, at any depth."""
    if _plain(args) and (not kwargs or _plain(kwargs)):
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
