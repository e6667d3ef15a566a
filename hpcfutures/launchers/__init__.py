"""Launcher plug-ins and their discovery.

Built-in launchers are listed by module so that detecting one never imports
another's dependencies (the MPI plug-in imports mpi4py only when used).
Third-party launchers register under the ``hpcfutures.launchers`` entry-point
group and take part in detection before the built-in fallbacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from .._errors import ConfigurationError
from ._base import AddressExchange, Launcher, SchedulerInfo

__all__ = ["AddressExchange", "Launcher", "SchedulerInfo", "detect_launcher", "get_launcher"]

#: name -> "module:Class", in detection order: the most specific first, the
#: laptop default last.  A launcher whose variables are present wins.
BUILTIN = {
    "local": "hpcfutures.launchers.local:LocalLauncher",
    "slurm": "hpcfutures.launchers.slurm:SlurmLauncher",
    "mpi": "hpcfutures.launchers.mpi:MPILauncher",
    "embedded": "hpcfutures.launchers.embedded:EmbeddedLauncher",
}


def _load(spec: str) -> type[Launcher]:
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _plugins() -> dict[str, str]:
    """Launchers installed by other packages (entry-point group hpcfutures.launchers)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group="hpcfutures.launchers")}


def _registry() -> dict[str, str]:
    available = {}
    for name, spec in BUILTIN.items():
        if name == "embedded":
            available.update(_plugins())
        available.setdefault(name, spec)
    return available


def get_launcher(name: str) -> type[Launcher]:
    """The launcher class registered under ``name``."""
    registry = _registry()
    if name not in registry:
        raise ConfigurationError(
            f"unknown launcher {name!r}; known launchers: {', '.join(registry)}"
        )
    try:
        return _load(registry[name])
    except ModuleNotFoundError as err:
        raise ConfigurationError(f"launcher {name!r} cannot be loaded: {err}") from err


def detect_launcher(environ: Mapping[str, str]) -> tuple[type[Launcher], str]:
    """The first launcher whose environment is present, and why it was chosen."""
    for name, spec in _registry().items():
        try:
            cls = _load(spec)
        except ModuleNotFoundError:
            continue  # a built-in not written yet, or a plug-in with a missing dependency
        reason = cls.detect(environ)
        if reason:
            return cls, reason
    raise AssertionError("the embedded launcher always detects")  # pragma: no cover
