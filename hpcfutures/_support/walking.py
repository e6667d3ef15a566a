"""The one walk over a call's arguments: find the values of one kind, at any depth.

Dask resolves its own futures at any depth of lists, tuples (named ones too),
sets and dicts, so this walk opens the same containers and nothing else.  The
client walks with it to find its futures among a call's arguments
(``_facade/core/arguments.py``); a worker walks with it to put each dependency's
value in its slot (``_remote/carried.py``): the same rules both ways, so a slot is
found exactly where a future was.

A container that holds nothing of the kind comes back as the very same object,
so the common case (plain data) copies nothing.  Where something changed, a
container is rebuilt as Dask rebuilds it: a dict as a dict, a named tuple as its
own type, other lists, tuples and sets as the plain type.  A container met again
inside itself is left alone rather than walked forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

__all__ = ["CONTAINERS", "plain", "swap_within"]

#: What Dask opens to resolve its futures (``dask._task_spec.parse_input``).
CONTAINERS = (list, tuple, set, dict)


def swap_within(value: Any, kind: type, swap: Callable[[Any], Any]) -> Any:
    """``value`` with every instance of ``kind`` inside it replaced by ``swap(it)``."""
    if isinstance(value, kind):
        return swap(value)
    if not isinstance(value, CONTAINERS) or plain(value, kind):
        return value
    return _walk(value, kind, swap, set())


def plain(container: Any, kind: type) -> bool:
    """No ``kind`` and no container inside: the usual case, settled in one pass."""
    worth_a_look = (kind, *CONTAINERS)
    for item in container.values() if isinstance(container, dict) else container:
        if isinstance(item, worth_a_look):
            return False
    return True


def _walk(container: Any, kind: type, swap: Callable[[Any], Any], path: set[int]) -> Any:
    if id(container) in path:
        return container
    path.add(id(container))
    try:
        changes = _changes(container, kind, swap, path)
    finally:
        path.discard(id(container))
    return _rebuilt(container, changes) if changes else container


def _changes(container: Any, kind: type, swap: Callable[[Any], Any], path: set[int]) -> dict:
    """What changes in ``container``: by key for a dict, else by position."""
    changes = {}
    places = container.items() if isinstance(container, dict) else enumerate(container)
    for place, item in places:
        if isinstance(item, kind):
            new = swap(item)
        elif isinstance(item, CONTAINERS) and not plain(item, kind):
            new = _walk(item, kind, swap, path)
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
