"""Reading batch systems' task environments: small pure helpers, no I/O but one command runner.

The plug-ins for Grid Engine, PBS, LSF, Flux and the Cray launchers all ask the
same few questions of ``os.environ``:

* an integer variable, with an error that names it and the system;
* *did an MPI launcher start this process?*  ``mpiexec`` inside a batch job
  keeps the job's variables but numbers the processes itself, and then only
  the MPI plug-in knows the ranks (:func:`mpi_disagreement`);
* where a job array starts and ends, when the system does not say
  (:data:`ARRAY_INDICES_VAR`), and how many processes a launch has, when the
  launcher does not say (:data:`SIZE_VAR`);
* a launch id safe to put in a file name (:func:`safe_id`).

Keeping them here keeps each plug-in a page long, and testable on fake environments.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
from collections.abc import Mapping, Sequence

from .._errors import LauncherError

__all__ = [
    "ARRAY_INDICES_VAR",
    "SIZE_VAR",
    "IndexSpan",
    "int_var",
    "mpi_disagreement",
    "mpi_launched",
    "parse_span",
    "run_command",
    "safe_id",
    "size_override",
]

logger = logging.getLogger("hpcfutures")

#: Set by the user when a batch system does not tell an array element where
#: its array starts or ends (PBS, LSF): ``FIRST-LAST`` or ``FIRST-LAST:STEP``.
ARRAY_INDICES_VAR = "HPCFUTURES_ARRAY_INDICES"
#: Set by the user when a launcher does not tell its processes how many it
#: started (ALPS, PALS without PMI_SIZE, ``pbsdsh -c``).
SIZE_VAR = "HPCFUTURES_SIZE"
#: Seconds allowed for a batch system's command (qstat, qdel, bkill).
COMMAND_TIMEOUT = 30.0

#: (rank, size) variables of MPI launchers: MPICH/Hydra, Intel MPI and Cray
#: PMI set PMI_*, Open MPI OMPI_COMM_WORLD_*, PMIx launchers PMIX_RANK.
_MPI_NUMBERING = (("PMI_RANK", "PMI_SIZE"),
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                  ("PMIX_RANK", None))


def int_var(environ: Mapping[str, str], name: str, system: str) -> int | None:
    """An integer variable; None when unset or empty; LauncherError when garbled."""
    text = environ.get(name, "").strip()
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise LauncherError(
            f"{name}={text!r} is not an integer; is this really a {system} task environment? "
            "Choose the launcher yourself with launcher=... (HPCFUTURES_LAUNCHER) if not"
        ) from None


def mpi_disagreement(environ: Mapping[str, str], rank: int, size: int | None) -> str | None:
    """Why an MPI launcher, not the one that says ``rank`` of ``size``, started this process.

    A launcher that also speaks PMI (``flux run``, PALS' ``mpiexec``,
    ``jsrun``) sets MPI variables that agree with its own numbering. Any
    other ``mpiexec`` inside a batch job numbers its processes itself while the
    job's variables stay, and then only MPI knows who is who. None when no MPI
    variable is set or all agree.
    """
    for rank_var, size_var in _MPI_NUMBERING:
        mpi_rank = environ.get(rank_var, "").strip()
        if mpi_rank == "":
            continue
        mpi_size = environ.get(size_var, "").strip() if size_var else ""
        if mpi_rank != str(rank) or (mpi_size and size is not None and mpi_size != str(size)):
            return (f"{rank_var}={mpi_rank}" + (f", {size_var}={mpi_size}" if mpi_size else "")
                    + f" disagree with rank {rank} of {size if size is not None else '?'}: "
                    "an MPI launcher (mpiexec/mpirun) started this process")
    return None


def mpi_launched(environ: Mapping[str, str]) -> str | None:
    """Why an MPI launcher started this process (any MPI rank variable is set); else None.

    For batch systems whose own variables describe the job, not the process:
    every process started inside their job carries them, so an MPI rank
    variable beside them means ``mpiexec`` numbered this process.
    """
    for rank_var, _ in _MPI_NUMBERING:
        value = environ.get(rank_var, "").strip()
        if value != "":
            return (f"{rank_var}={value} is set: an MPI launcher (mpiexec/mpirun) started "
                    "this process")
    return None


def size_override(environ: Mapping[str, str]) -> int | None:
    """The world size the user gave in HPCFUTURES_SIZE, if any."""
    size = int_var(environ, SIZE_VAR, "hpcfutures")
    if size is not None and size < 1:
        raise LauncherError(f"{SIZE_VAR}={size} must be at least 1")
    return size


def safe_id(text: str) -> str:
    """``text`` reduced to characters that are safe in a file name (launch ids become paths).

    Flux writes job ids as F58 (``ƒ2bXhy9``); the ``ƒ`` becomes ``f``.
    """
    text = text.replace("ƒ", "f")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "unknown"


@dataclasses.dataclass(frozen=True)
class IndexSpan:
    """A regular range of job-array indices: ``first``, ``first + step``, ... ``last``."""

    first: int
    last: int
    step: int = 1

    def __post_init__(self) -> None:
        if self.step < 1 or self.last < self.first:
            raise LauncherError(
                f"the job-array range {self} is empty or runs backwards; "
                "give it as FIRST-LAST or FIRST-LAST:STEP with FIRST <= LAST"
            )

    @property
    def size(self) -> int:
        return (self.last - self.first) // self.step + 1

    def rank(self, index: int) -> int:
        """The position of ``index`` in the span: the element's rank."""
        if not self.first <= index <= self.last or (index - self.first) % self.step:
            raise LauncherError(
                f"array index {index} is not in the range {self}: the range hpcfutures "
                f"assumed is wrong; give the array's real one in {ARRAY_INDICES_VAR}"
            )
        return (index - self.first) // self.step

    def __str__(self) -> str:
        return f"{self.first}-{self.last}" + (f":{self.step}" if self.step != 1 else "")


def parse_span(text: str, source: str) -> IndexSpan:
    """``"0-7"``, ``"1-15:2"`` or ``"4"`` as an IndexSpan; ``source`` names where it came from."""
    match = re.fullmatch(r"\s*(\d+)(?:\s*-\s*(\d+)(?:\s*:\s*(\d+))?)?\s*", text)
    if match is None:
        raise LauncherError(
            f"{source} is {text!r}, which is not one regular range like 0-7 or 1-15:2; "
            "hpcfutures needs a regular range to turn array indices into ranks"
        )
    first = int(match[1])
    return IndexSpan(first, int(match[2] or first), int(match[3] or 1))


def run_command(command: Sequence[str], purpose: str) -> subprocess.CompletedProcess | None:
    """Run a batch-system command with a deadline; None (and a warning) if it failed.

    Used for chores that must not fail the launch: asking when a job was
    submitted, deleting pending array elements.
    """
    try:
        result = subprocess.run(list(command), capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as err:
        logger.warning("could not %s (%s); the command was: %s", purpose, err, " ".join(command))
        return None
    if result.returncode != 0:
        logger.warning("could not %s: '%s' failed with status %d: %s", purpose,
                       " ".join(command), result.returncode, result.stderr.strip())
        return None
    return result
