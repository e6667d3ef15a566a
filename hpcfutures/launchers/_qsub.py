"""Which batch system a ``qsub`` belongs to: PBS and Grid Engine share the name.

A login node may have both on ``PATH`` (or Slurm's ``sbatch`` beside one of
them): the first ``qsub`` found is not necessarily the system asked for.
Each tells who it is when asked::

    PBS (OpenPBS, PBS Pro)     qsub --version   pbs_version = 23.06.06
    Grid Engine (SGE, OGS...)  qstat -help      SGE 8.1.9  (first line; qstat beside it)

Every ``qsub`` on ``PATH`` is asked (once per process), in ``PATH`` order.  Only
``--version`` is put to a ``qsub``: PBS's reads ``-help`` as ``-h -e lp`` and submits
a held job from its standard input (OpenPBS 23.06 does); ``qstat`` submits nothing.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping

__all__ = ["find_qsubs", "qsub_flavour"]

#: Seconds a ``qsub`` may take to say who it is.
ASK_TIMEOUT = 10.0
#: First words of ``qstat -help`` in the Grid Engine family.
_GRID_ENGINE_BANNERS = ("SGE ", "GE ", "OGS", "Univa", "Altair Grid Engine", "Son of Grid Engine")


@functools.cache
def qsub_flavour(path: str) -> str | None:
    """"pbs", "sge", or None (it would not say) for the ``qsub`` at ``path``."""
    version = _ask(path, "--version")
    if "pbs_version" in version:
        return "pbs"
    helped = _ask(os.path.join(os.path.dirname(path), "qstat"), "-help").lstrip()
    if helped.startswith(_GRID_ENGINE_BANNERS):
        return "sge"
    return None


def _ask(path: str, option: str) -> str:
    try:
        done = subprocess.run([path, option], capture_output=True, text=True,
                              timeout=ASK_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


def find_qsubs(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """Every ``qsub`` on ``PATH`` (one per real file), in order, with its flavour."""
    environ = os.environ if environ is None else environ
    found: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for folder in environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", "qsub")
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        found.append((path, qsub_flavour(path)))
    return found
