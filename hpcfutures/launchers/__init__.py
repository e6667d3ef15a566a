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
from ._base import Launcher
from ._exchange import AddressExchange, SchedulerInfo
from ._identity import Identity

__all__ = [
    "AddressExchange", "Identity", "Launcher", "SchedulerInfo", "detect_launcher", "get_launcher",
]

#: name -> "module:Class", in detection order: the most specific first, the
#: laptop default last.  A launcher whose variables are present wins.
#: MPI comes before Slurm: an MPI launch inside a Slurm job (``srun --mpi=pmi2``,
#: or ``mpiexec`` in a batch script, whose SLURM_PROCID is not the MPI rank)
#: takes its roles from COMM_WORLD; the MPI plug-in leaves a plain ``srun`` to
#: Slurm (no PMI variables), and ``srun --mpi=...`` too when mpi4py is missing.
#: Launchers that number the very process (``flux run``, ``jsrun``, ``aprun``,
#: PALS' ``mpiexec``) come before MPI and Slurm, whose variables their tasks may
#: inherit (Flux inside a Slurm job; ALPS under a Slurm batch script); each steps
#: aside when MPI rank variables disagree with its numbering. Batch systems whose
#: variables describe the job, not the process (Grid Engine, PBS, LSF: arrays and
#: job scripts) come last and step aside whenever an MPI rank variable is set, so
#: ``mpiexec`` in a PBS job or a Grid Engine parallel environment goes to MPI.
#: Details and a table: docs/batch-systems.rst.
BUILTIN = {
    "run": "hpcfutures.launchers.run:RunLauncher",
    "flux": "hpcfutures.launchers.flux:FluxLauncher",
    "jsrun": "hpcfutures.launchers.lsf:JsrunLauncher",
    "alps": "hpcfutures.launchers.cray:ALPSLauncher",
    "pals": "hpcfutures.launchers.cray:PALSLauncher",
    "mpi": "hpcfutures.launchers.mpi:MPILauncher",
    "slurm": "hpcfutures.launchers.slurm:SlurmLauncher",
    "sge": "hpcfutures.launchers.sge:SGELauncher",
    "pbs": "hpcfutures.launchers.pbs:PBSLauncher",
    "lsf": "hpcfutures.launchers.lsf:LSFLauncher",
    "local": "hpcfutures.launchers.local:LocalLauncher",
}

#: Names that launchers had before 0.2, still accepted.  (Before 0.2 "local"
#: named ``hpcfutures run``'s plug-in; the laptop default's plug-in refuses to
#: run under ``hpcfutures run``, so that old spelling fails loudly.)
FORMER_NAMES = {"embedded": "local"}


def _load(spec: str) -> type[Launcher]:
    module_name, _, attr = spec.partition(":")
    loaded: type[Launcher] = getattr(importlib.import_module(module_name), attr)
    return loaded  # checked to be a Launcher by _load_by_path where the user named it


def _plugins() -> dict[str, str]:
    """Launchers installed by other packages (entry-point group hpcfutures.launchers)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group="hpcfutures.launchers")}


def _registry() -> dict[str, str]:
    available = {}
    for name, spec in BUILTIN.items():
        if name == "local":
            available.update(_plugins())
        available.setdefault(name, spec)
    return available


def get_launcher(name: str) -> type[Launcher]:
    """The launcher class registered under ``name``, or named ``"package.module:ClassName"``.

    The second form needs no installed distribution, only an importable module:
    ``launcher="my_site.launchers:PBSLauncher"`` or the same in ``HPCFUTURES_LAUNCHER``.
    """
    if ":" in name:
        return _load_by_path(name)
    name = FORMER_NAMES.get(name, name)
    registry = _registry()
    if name not in registry:
        raise ConfigurationError(
            f"unknown launcher {name!r}; known launchers: {', '.join(registry)}"
        )
    try:
        return _load(registry[name])
    except ModuleNotFoundError as err:
        raise ConfigurationError(f"launcher {name!r} cannot be loaded: {err}") from err


def _load_by_path(spec: str) -> type[Launcher]:
    """The class named by ``"package.module:ClassName"``, checked to be a launcher."""
    try:
        cls = _load(spec)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigurationError(f"launcher {spec!r} cannot be loaded: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise ConfigurationError(
            f"launcher {spec!r} is {cls!r}, not a subclass of hpcfutures.Launcher"
        )
    return cls


def detect_launcher(environ: Mapping[str, str]) -> tuple[type[Launcher], str]:
    """The first launcher whose environment is present, and why it was chosen."""
    for spec in _registry().values():
        try:
            cls = _load(spec)
        except ModuleNotFoundError:
            continue  # a built-in not written yet, or a plug-in with a missing dependency
        reason = cls.detect(environ)
        if reason:
            return cls, reason
    raise AssertionError("the local launcher always detects")  # pragma: no cover
