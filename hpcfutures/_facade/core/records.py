"""The engine's record of a call or a group of calls, kept apart from its future.

A :class:`~.futures.TaskFuture` is what the user holds; how its call travels is
written here, in one :class:`Call` per future (a user's call, a bundle of calls,
a map chunk, or a value picked out of a bundle), read and written on the loop
thread by the engine's parts only.  A call's way, and the fields that say where
it is::

    submit ─► HELD ───────────────► SENT ─────────────────► DONE / FAILED
              held: its call,       dask: its own task,      recipe, members dropped
              waiting in its        or bundle: (group, i)    (settle)
              stream (bundles.py)   in a group's task          ▲
                   │                (sending.py)               │
                   │ an argument      │ its worker died         │
                   │ of a later call  ▼                         │
                   └─► sent alone   LOST ─► RESENT (recipe) ────┘
                                    losses counted; the death certificate
                                    blames a call or frees it (recovery.py)

A call that waits for a lone call sent straight to a worker is ``parked`` on
that call's group until it is settled (sending.py).  Groups keep what a group
needs: ``members`` (a bundle's futures, their picks made again if it is sent
again), ``places`` (a chunk's positions in its map, for errors) and ``sent_at``
(for pacing.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Call"]


class Call:
    """Where one future's call is, and how to send it again (loop thread)."""

    __slots__ = ("bundle", "dask", "held", "losses", "members", "parked", "places", "recipe",
                 "sent_at")

    def __init__(self) -> None:
        #: HELD: its ``(future, fn, args, kwargs)`` while it waits to be bundled.
        self.held: tuple | None = None
        #: SENT: the Dask future computing its value, once it has one of its own
        #: (its own task, a group's task, or a pick of it out of its bundle).
        self.dask: Any = None
        #: SENT in a bundle: ``(bundle's future, index)`` (futures are TaskFutures,
        #: typed Any here: futures.py imports this module).
        self.bundle: tuple[Any, int] | None = None
        #: How to send its task again should its worker die under it:
        #: ``(runner, fn, args, kwargs, depends)``; dropped once done.
        self.recipe: tuple | None = None
        #: LOST: times its task was lost with a worker that it did not kill.
        self.losses = 0
        #: A bundle's own futures; dropped once done.
        self.members: list[Any] | None = None
        #: A map chunk's positions of its items in the map (for errors).
        self.places: Sequence[int] | None = None
        #: When a group's task was sent (``time.monotonic``), for pacing.py.
        self.sent_at: float | None = None
        #: The lone call sent straight to a worker that it waits for (sending.py).
        self.parked: Any = None

    def settled(self) -> None:
        """Its future is done: it holds no call any more (a done future may outlive
        its call by long, and a bundle's outlives its members while one lives)."""
        self.recipe = self.members = None
