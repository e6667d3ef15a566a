"""What the engine's parts ask of the engine, and of one another through it.

The bridge (``_facade/bridge.py``) is the engine: it owns the parts that move a
call (``batcher``, ``submits``, ``sender``, ``completions``, ``recovery``,
``mpi_calls``) and builds each with itself.  A part reaches the
others only through the engine it was built with, never through a callback
handed to it, so what each part needs of the rest is written here, once::

    submits ──► sender ─────────► completions ──► settle(future)
                  ▲                    │
                  │ resend             │ a task lost with its worker
                  └───── recovery ◄────┘ (or break_executor: none left)

Everything here runs on the loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ..._remote.express import Early
from .batching import Batcher
from .futures import TaskFuture

__all__ = ["Engine"]


class Sends(Protocol):
    """The engine's sender (sending.py), as the other parts use it."""

    def launch_internal(self, runner: Callable[..., Any], args: tuple, name: str,
                        calls: int = 1, expect: float | None = None) -> TaskFuture | None: ...

    def launch_alone(self, future: TaskFuture, fn: Callable[..., Any], args: tuple,
                     kwargs: dict) -> None: ...

    def resend(self, future: TaskFuture, recipe: tuple) -> None: ...


class Follows(Protocol):
    """The engine's completions (completions.py): settle a future when its task ends."""

    def follow(self, dask_future: Any, future: TaskFuture) -> None: ...


class Recovers(Protocol):
    """The engine's recovery (recovery.py): what becomes of a group lost with its worker."""

    def lost(self, dask_future: Any, future: TaskFuture, exception: BaseException) -> bool: ...


class Engine(Protocol):
    """The engine as its parts see it (the bridge is one)."""

    @property
    def batcher(self) -> Batcher:
        """Sizes every group of calls, for all streams (batching.py)."""

    @property
    def sender(self) -> Sends: ...

    @property
    def completions(self) -> Follows: ...

    @property
    def recovery(self) -> Recovers: ...

    @property
    def early_outcomes(self) -> dict[TaskFuture, Callable[[Early], None]]:
        """A running group's future -> who takes the outcomes of its first calls, and
        the calls its worker gave back (each stream sets and drops its own)."""

    @property
    def broken(self) -> BaseException | None:
        """Why the executor is broken, once it is."""

    def in_background(self, awaitable: Any) -> asyncio.Future:
        """Run ``awaitable`` on the loop without waiting for it."""

    def small(self) -> bool:
        """Whether the launch is small: a group's finished calls travel ahead of its end."""

    def wake(self) -> None:
        """Plan and send what waits (a group came back, a worker answered)."""

    def break_executor(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail every outstanding call: the executor can no longer run any."""

    def connection_lost(self) -> None:
        """The scheduler is gone."""

    def send_held_now(self, future: TaskFuture) -> None:
        """Send a call still held for bundling at once: it became an argument."""
