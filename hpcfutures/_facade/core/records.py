"""The engine's record of a call or a group of calls, kept apart from its future.

A :class:`~.futures.TaskFuture` is what the user holds; how its call travels is
written here, in one :class:`Call` per future (a user's call, a bundle of calls,
a map chunk, or a value picked out of a bundle), read and written on the loop
thread by the engine's parts only.  A call's way, the transitions that move it
(methods of :class:`Call`, the only code that changes a record) and the fields
that say where it is::

    submit ─► HELD ──────────► SENT ─────────────────────► DONE / FAILED
              hold()           sending(recipe), then        settled(): recipe
              held: its call   sent(dask): its own task,      and members dropped
              in its stream    or in_bundle(group, i)            ▲
              (bundles.py)     (sending.py, bundles.py)          │
                │ unhold():      │ its worker died               │
                │ bundled, or    ▼                               │
                │ sent alone   LOST ──► RESENT: sent(dask, recipe)
                └──► SENT      drop_task(); lost_again() counts a loss the death
                               certificate does not blame on it (recovery.py)

Groups keep what a group needs: ``members`` (a bundle's futures, their picks
made again if it is sent again) and ``places`` (a chunk's positions in its map,
for errors), both set by ``group_sent()`` with ``sent_at`` (for pacing.py), and
cut by ``gave_back()`` when its worker gives calls back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..._remote.calls import Rows

__all__ = ["Call"]


class Call:
    """Where one future's call is, and how to send it again (loop thread)."""

    __slots__ = ("bundle", "dask", "held", "losses", "members", "places", "recipe", "sent_at")

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

    # ------------------------------------------------------------------ HELD
    def hold(self, call: tuple) -> None:
        """HELD: ``call`` waits in its stream to be bundled."""
        self.held = call

    def unhold(self) -> tuple | None:
        """Leave HELD (bundled, sent alone, or failed by a drain): the call it held,
        or None when it held none any more."""
        call, self.held = self.held, None
        return call

    # ------------------------------------------------------------------ SENT
    def sending(self, recipe: tuple) -> None:
        """About to be sent as ``recipe`` says (kept to send it again)."""
        self.recipe = recipe

    def sent(self, dask_future: Any, recipe: tuple | None = None) -> None:
        """SENT: ``dask_future`` computes its value (its own task, a group's task, or a
        pick of it out of its bundle); ``recipe``, when given, sends it again."""
        self.dask = dask_future
        if recipe is not None:
            self.recipe = recipe

    def in_bundle(self, bundle: Any, index: int) -> None:
        """SENT as call ``index`` of ``bundle`` (a group's future)."""
        self.bundle = (bundle, index)

    def group_sent(self, *, members: list | None = None,
                   places: Sequence[int] | None = None) -> None:
        """A group's task was sent now: a bundle's ``members``, a chunk's ``places``."""
        self.sent_at = time.monotonic()
        if members is not None:
            self.members = members
        if places is not None:
            self.places = places

    def gave_back(self, rest: int) -> None:
        """Its worker gave back the group's calls from ``rest`` on: the group keeps
        the ones before (its members, its places), and would send only those again."""
        if self.members is not None:
            del self.members[rest:]
        if self.places is not None:
            self.places = self.places[:rest]
        if self.recipe is not None:  # a bundle's calls, or a chunk's rows, come first
            runner, fn, (calls, *flags), kwargs, depends = self.recipe
            kept = calls.first(rest) if isinstance(calls, Rows) else calls[:rest]
            self.recipe = (runner, fn, (kept, *flags), kwargs, depends)

    # ------------------------------------------------------------------ LOST
    def drop_task(self) -> None:
        """Its task (or its pick out of a bundle) is gone: lost with its worker, given
        back, or released once cancelled; made again should it be needed."""
        self.dask = None

    def cut_loose(self) -> None:
        """Done, but its task on the cluster was lost for good: its value travels with
        the calls it is an argument of, from here."""
        self.dask = self.bundle = None

    def lost_again(self) -> int:
        """Its task was lost once more, not by its own doing: how many times now."""
        self.losses += 1
        return self.losses

    # ------------------------------------------------------------------ DONE
    def settled(self) -> None:
        """Its future is done: it holds no call any more (a done future may outlive
        its call by long, and a bundle's outlives its members while one lives)."""
        self.recipe = self.members = None
