"""Dask's version check of a joining worker, done once per installation, not per worker.

Each join makes Dask's scheduler compare the new worker's package versions with
those of every worker already there (``Scheduler.add_worker`` calls
``distributed.versions.error_message`` with all of them): O(workers) per join,
O(workers²) over a launch's start.  On a large launch that is, after the TLS
handshake, the costliest single step of a join on the scheduler, and it grows
with every rank added (``benchmarks/scale.py`` measures joins).

The check's answer depends only on the distinct sets of versions, and a
launch's ranks nearly always run one installation.  So the scheduler's check
is handed one worker per distinct set: Dask's own function, the same table in
the same warning when versions differ.  Each worker's set is worked out once,
when it is first seen, and forgotten when it has gone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_versions_once_per_installation"]


def check_versions_once_per_installation() -> None:
    """Make this process's Dask scheduler check versions per distinct installation."""
    import distributed.scheduler as dask_scheduler

    current = dask_scheduler.version_module
    if not isinstance(current, _OncePerInstallation):
        # A stand-in for the module, as the one name the scheduler reads it through.
        dask_scheduler.version_module = _OncePerInstallation(current)  # type: ignore[assignment]


class _OncePerInstallation:
    """``distributed.versions`` as the scheduler module sees it, with a cheaper
    ``error_message``; everything else is Dask's."""

    def __init__(self, module: Any) -> None:
        self._module = module
        #: Worker address -> the key of its installation, as of the last check.
        self._known: dict[str, Any] = {}
        #: Installation key -> its workers' versions by address (one is shown to Dask).
        self._members: dict[Any, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def error_message(self, scheduler: Any, workers: dict[str, Any], source: Any,
                      source_name: str = "Client") -> Any:
        # Only the workers that came or went since the last check are looked at (the
        # set differences run in C); a worker's versions never change while it is
        # connected, and the one joining now is compared in full anyway (``source``).
        known, members = self._known, self._members
        if workers.keys() != known.keys():
            for address in known.keys() - workers.keys():
                key = known.pop(address)
                group = members[key]
                del group[address]
                if not group:
                    del members[key]
            for address in workers.keys() - known.keys():
                key = known[address] = _installation(workers[address])
                members.setdefault(key, {})[address] = workers[address]
        shown = dict(next(iter(group.items())) for group in members.values())
        return self._module.error_message(scheduler, shown, source, source_name=source_name)


def _installation(versions: Any) -> Any:
    """What the version check reads of a worker's versions, as a hashable value."""
    packages = versions.get("packages") if isinstance(versions, dict) else None
    if not isinstance(packages, dict):
        return repr(packages)
    return tuple(sorted((str(name), repr(value)) for name, value in packages.items()))
