"""A call's arguments as Dask carries them: in a box it never opens.

Dask reads a task's arguments as part of its graph.  A ``Task``, ``TaskRef``,
``DataNode`` or ``Alias`` among them (exactly what a Dask collection computed
with an executor as its scheduler passes) would be run or resolved instead of
carried, and a reference to a key Dask does not know breaks its scheduler.  So
the arguments of every user call travel as one :class:`Carried` value, which
Dask pickles and never looks into.  The only part Dask sees is the call's
dependencies: this executor's futures among the arguments are replaced in the
box by :class:`Slot` markers and handed to Dask beside it, so that it resolves
them worker to worker; on the worker, :func:`uncarried` puts each dependency's
value into its slot::

    client:  submit(f, 1, fut, key=Task(...))
    Dask:    runner(f, (Carried((1, Slot(0)), {"key": Task(...)}), <Dask future of fut>), {})
    worker:  f(1, <value of fut>, key=Task(...))

Slots are found where the client found the futures, by the same walk
(``_support/walking.py``).
"""

from __future__ import annotations

from typing import Any

from .._support.walking import swap_within

__all__ = ["Carried", "Slot", "carried", "uncarried"]


class Carried:
    """A call's ``args`` and ``kwargs``, opaque to Dask (or, in ``args``, a bundle's whole
    list of ``(fn, args, kwargs)`` calls: one box for all of them)."""

    __slots__ = ("args", "kwargs")

    def __init__(self, args: Any, kwargs: dict) -> None:
        self.args = args
        self.kwargs = kwargs

    def __reduce__(self) -> tuple[type[Carried], tuple[Any, dict]]:
        return Carried, (self.args, self.kwargs)

    def __repr__(self) -> str:
        return f"Carried({self.args!r}, {self.kwargs!r})"


class Slot:
    """Where the value of dependency number ``index`` goes."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[type[Slot], tuple[int]]:
        return Slot, (self.index,)

    def __repr__(self) -> str:
        return f"Slot({self.index})"


def carried(args: tuple, kwargs: dict, dependencies: list | tuple = ()) -> tuple[tuple, dict]:
    """The ``(args, kwargs)`` a runner is given through Dask: the box, then the
    dependencies (Dask futures, in the order of their slots), and no keywords."""
    return (Carried(args, kwargs), *dependencies), {}


def uncarried(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """On the worker: the call's own ``args`` and ``kwargs``, each dependency's value
    in its slot.  Arguments that did not travel in a box come back as they are."""
    if not args or type(args[0]) is not Carried:
        return args, kwargs
    box, values = args[0], args[1:]
    if not values:
        return box.args, box.kwargs

    def fill(slot: Slot) -> Any:
        return values[slot.index]

    return swap_within(box.args, Slot, fill), swap_within(box.kwargs, Slot, fill)
