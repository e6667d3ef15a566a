"""Dask's version check of a joining worker, done once per installation, not per worker.

Each join makes Dask's scheduler compare the new worker's package versions with
those of every worker already there (``Scheduler.add_worker`` calls
``distributed.versions.error_message`` with all of them): O(workers) per join,
O(workers²) for a launch.  At 1,000 worker ranks that was 8 % of the
scheduler's CPU over a whole run, more than any other single step of a join
but the TLS handshake (py-spy, ``benchmarks/scale.py``), and it grows with
every rank added.

The check's answer depends only on the distinct sets of versions, and a
launch's ranks nearly always run one installation.  So the scheduler's check
is handed one worker per distinct set: Dask's own function, the same table in
the same warning when versions differ.  Each worker's set is worked out once,
when it joins, and remembered with the dict the scheduler keeps for it.
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
        #: Worker address -> (its versions dict, the key of its installation).  The
        #: dict is held, so its identity stands for it while the entry lives.
        self._known: dict[str, tuple[Any, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def error_message(self, scheduler: Any, workers: dict[str, Any], source: Any,
                      source_name: str = "Client") -> Any:
        distinct: dict[Any, tuple[str, Any]] = {}
        known = self._known
        for address, versions in workers.items():
            entry = known.get(address)
            if entry is None or entry[0] is not versions:
                entry = known[address] = (versions, _installation(versions))
            distinct.setdefault(entry[1], (address, versions))
        if len(known) > 2 * len(workers) + 64:  # departed workers: forget them
            self._known = {a: known[a] for a in workers if a in known}
        return self._module.error_message(
            scheduler, dict(distinct.values()), source, source_name=source_name)


def _installation(versions: Any) -> Any:
    """What the version check reads of a worker's versions, as a hashable value."""
    packages = versions.get("packages") if isinstance(versions, dict) else None
    if not isinstance(packages, dict):
        return repr(packages)
    return tuple(sorted((str(name), repr(value)) for name, value in packages.items()))
