"""Which batch system is here, and which of its commands to run.

``allocate()`` and ``hpcfutures submit`` use the system asked for
(``batch_system=``) or the first one whose command is on PATH: ``sbatch``, then
``bsub``, then ``qsub``, which PBS and Grid Engine share (_qsub.py tells them
apart, and a system asked for by name uses its own ``qsub`` wherever it is on
PATH).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping

from .._errors import AllocationError
from ._batchscript import LSF, PBS, BatchSystem, GridEngine, Slurm
from ._qsub import find_qsubs

__all__ = ["BATCH_SYSTEMS", "detect_batch_system", "get_batch_system"]

logger = logging.getLogger("hpcfutures")


BATCH_SYSTEMS: dict[str, type[BatchSystem]] = {
    "slurm": Slurm, "sge": GridEngine, "pbs": PBS, "lsf": LSF}


def get_batch_system(name: str) -> BatchSystem:
    try:
        return BATCH_SYSTEMS[name.lower()](locate=_own_qsub_dir)
    except KeyError:
        raise ValueError(f"batch_system must be one of {', '.join(BATCH_SYSTEMS)}, "
                         f"got {name!r}") from None


def _own_qsub_dir(system: BatchSystem, environ: Mapping[str, str] | None = None) -> str | None:
    """The folder of the first ``qsub`` on PATH that is ``system``'s (PBS and Grid Engine
    share the name: see _qsub.py); None to leave it to PATH (none would say whose it is)."""
    qsubs = find_qsubs(environ)
    for path, flavour in qsubs:
        if flavour == system.name:
            return os.path.dirname(path)
    if not qsubs or any(flavour is None for _, flavour in qsubs):
        return None
    hint = "often /opt/pbs/bin" if system.name == "pbs" else "$SGE_ROOT/bin/<arch>"
    raise AllocationError(
        f"batch_system={system.name!r}, but no qsub on PATH is {system.title}'s: "
        f"{_found_here(environ)}. Put {system.title}'s bin directory on PATH ({hint}).")


def detect_batch_system(environ: Mapping[str, str] | None = None) -> BatchSystem:
    """The batch system whose commands are here: sbatch, bsub, then qsub (PBS or Grid
    Engine, as that qsub says).  Where several are, the first of that order is used
    (pass ``batch_system=`` for another); the log names them all."""
    environ = os.environ if environ is None else environ
    found = _systems_here(environ)
    if not found:
        raise AllocationError(
            "no batch system found on this machine (none of sbatch, qsub, bsub is on PATH): "
            "run this on the cluster's login node, or pass batch_system= with its commands "
            "on PATH")
    chosen = found[0][1]
    if len(found) > 1:
        logger.info("several batch systems here (%s): using %s; batch_system= picks another",
                    _describe(found), chosen.title)
    return chosen


def _systems_here(environ: Mapping[str, str]) -> list[tuple[str, BatchSystem]]:
    """(where, system) for each batch system whose commands are on PATH, in order of use."""
    path = environ.get("PATH")
    found: list[tuple[str, BatchSystem]] = []
    for kind in (Slurm, LSF):
        where = shutil.which(kind.probe, path=path)
        if where:
            found.append((where, kind()))
    for where, flavour in find_qsubs(environ):
        if flavour is None:  # it would not say: Grid Engine's tools beside it tell
            flavour = "sge" if environ.get("SGE_ROOT") or shutil.which("qconf", path=path) \
                else "pbs"
        if all(other.name != flavour for _, other in found):
            found.append((where, BATCH_SYSTEMS[flavour](bin_dir=os.path.dirname(where))))
    return found


def _found_here(environ: Mapping[str, str] | None) -> str:
    return _describe(_systems_here(os.environ if environ is None else environ))


def _describe(found: list[tuple[str, BatchSystem]]) -> str:
    if not found:
        return "found none of sbatch, bsub, qsub on PATH"
    return "found " + ", ".join(f"{system.title} ({where})" for where, system in found)
