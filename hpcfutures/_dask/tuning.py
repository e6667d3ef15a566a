"""Dask's timing settings in a launch: how soon a lost or frozen worker is noticed.

The one place that sets Dask configuration for hpcfutures.  Every role applies
it in its own process before its Dask piece starts (:func:`apply`); a setting
the user gave (Dask's config file, ``DASK_*`` variables) is kept.

A node that drops off the network says nothing: no connection is closed,
nothing is refused.  The kernel notices on each TCP connection to it, once
data sent there stays unacknowledged, or keep-alive probes go unanswered, for
``distributed.comm.timeouts.tcp`` (Dask sets both from it); Dask then closes
the connection, and the scheduler removes the worker and runs its tasks
again elsewhere.  A worker whose process is frozen (SIGSTOP, a debugger, a
node swapping hard) keeps its connections (its kernel still acknowledges
what arrives) but sends no heartbeats: the scheduler removes it once it has
been silent for ``distributed.scheduler.worker-ttl``, checked that often, so
between one and two TTLs after it froze.  A task that holds the GIL does not
stop heartbeats (they run on the worker's event loop between the task's
bytecodes, or while it waits in C code that releases the GIL).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import dask.config
from dask.utils import parse_timedelta

__all__ = ["SETTINGS", "STEALING_INTERVAL", "STEAL_OFTEN_UP_TO", "apply", "patient_connects",
           "stealing_often", "users_setting"]

#: hpcfutures' values, and why (Dask's defaults in brackets).
SETTINGS: dict[str, Any] = {
    # [30 s] A node gone from the network is noticed this long after its
    # last answer (an idle connection: 10 s of silence, then ten keep-alive
    # probes a second apart), so within about 20 s.  Long enough for a
    # congested link or a switch's failover; a busy or frozen process does
    # not count, since its kernel keeps answering.
    "distributed.comm.timeouts.tcp": "20s",
    # [True] Each worker samples every thread's stack 100 times a second for
    # the dashboard's profile page, which hpcfutures does not serve unless
    # asked (with dashboard=True, DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=True
    # fills that page: see apply()).
    # An idle worker's timers cost a few percent of a core on a busy node, mostly
    # this: a core per few dozen worker ranks, taken from the user's calls, and on
    # an oversubscribed node from the one scheduler that every rank needs
    # (benchmarks/scale_real.py, benchmarks/scale.py).
    "distributed.worker.profile.enabled": False,
    # [20ms] The event loop's health check: a tick that comes more than
    # "distributed.admin.tick.limit" (3 s) late is still reported, 50 wake-ups
    # a second per process become 2.
    "distributed.admin.tick.interval": "500ms",
}
#: ``distributed.scheduler.worker-ttl`` stays at Dask's 5 minutes: the only
#: cost of a long TTL is the wait for a frozen worker, and a shorter one
#: would drop a worker whose task holds the GIL for minutes (a long regular
#: expression match, some C extensions), then the next worker that runs it.


def _dask_default(key: str) -> Any:
    """The value Dask ships for ``key`` (before any user configuration)."""
    return dask.config.get(key, config=dask.config.merge(*dask.config.defaults))


def _named_in_environment(key: str) -> bool:
    """Whether a ``DASK_`` variable sets ``key`` (Dask reads them into its config)."""
    wanted = "DASK_" + key.upper().replace(".", "__").replace("-", "_")
    return any(name.upper().replace("-", "_") == wanted for name in os.environ)


#: Seconds between Dask's work-stealing passes on a launch of at most
#: :data:`STEAL_OFTEN_UP_TO` workers ([1 s], which stays at larger sizes: each pass
#: costs the scheduler time in the number of busy and idle workers).  A group the
#: scheduler placed on a worker behind a call that turned out slow moves to a free
#: worker within a pass of the scheduler hearing how long that call runs, which the
#: worker tells it at once (``_remote/express.py``, ``_dask/express.py``).
STEALING_INTERVAL = "100ms"
STEAL_OFTEN_UP_TO = 64
STEALING_KEY = "distributed.scheduler.work-stealing-interval"


def stealing_often(expected_workers: int | None) -> contextlib.AbstractContextManager[Any]:
    """Dask's configuration for a scheduler made inside: work stealing every
    :data:`STEALING_INTERVAL` on a small launch (``expected_workers`` None: the
    laptop's local workers), unless the user set the interval."""
    small = expected_workers is None or expected_workers <= STEAL_OFTEN_UP_TO
    if not small or users_setting(STEALING_KEY):
        return contextlib.nullcontext()
    return dask.config.set({STEALING_KEY: STEALING_INTERVAL})


#: Dask's queue of tasks kept on the scheduler: off ("inf") on hpcfutures' scheduler.
SATURATION_KEY = "distributed.scheduler.worker-saturation"


def without_a_queue() -> contextlib.AbstractContextManager[Any]:
    """Dask's configuration for a scheduler made inside: no queue on the scheduler,
    whatever the user set (Dask reads the key when the scheduler is made).

    The client's batching engine already sends no more than the workers can take.
    Dask's queue also holds the finished results a dead worker took with it, to
    compute them again, and looks at it only when a task ends or a worker joins:
    when the client waits for just those results, nothing ends, and they would
    wait until the next worker died.
    """
    return dask.config.set({SATURATION_KEY: "inf"})


def users_setting(key: str) -> bool:
    """Whether the user set ``key`` (see :func:`apply`)."""
    return dask.config.get(key, None) != _dask_default(key) or _named_in_environment(key)


def apply() -> None:
    """Set :data:`SETTINGS` in this process, except those the user has set.

    A value other than Dask's default is the user's; so is one that a ``DASK_``
    variable gives, even when it equals Dask's default (``...PROFILE__ENABLED=True``
    turns Dask's profiler back on, which a value equal to the default in a
    config file cannot: Dask does not say where a value came from)."""
    ours = {key: value for key, value in SETTINGS.items() if not users_setting(key)}
    if ours:
        dask.config.set(ours)


def patient_connects(seconds: float) -> None:
    """Give Dask's connections at least ``seconds`` to be accepted (a large launch).

    A worker's registration is a connection to the scheduler, which Dask gives
    ``distributed.comm.timeouts.connect`` (30 s) before the worker fails to
    start; thousands of joins queue at one scheduler.  Never shortened, and a
    value the user set is kept."""
    key = "distributed.comm.timeouts.connect"
    current = dask.config.get(key, None)
    if current != _dask_default(key) or _named_in_environment(key):
        return
    if seconds > parse_timedelta(current):
        dask.config.set({key: f"{seconds:.0f}s"})
