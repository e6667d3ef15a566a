"""Reading task environments: small pure helpers, no I/O but one command runner.

Every launcher plug-in (Slurm, MPI, the local one, Grid Engine, PBS, LSF, Flux,
the Cray launchers) asks the same few questions of ``os.environ``:

* an integer variable, with an error that names it, its value, the launcher
  and what to do (:func:`int_var`, the only integer reader of the plug-ins);
* *did an MPI launcher start this process?*  ``mpiexec`` inside a batch job
  keeps the job's variables but numbers the processes itself, and then only
  the MPI plug-in knows the ranks (:func:`mpi_disagreement`; the variables
  MPI launchers set are listed once, in :data:`MPI_RANK_VARIABLES`);
* where a job array starts and ends, when the system does not say
  (:data:`ARRAY_INDICES_VAR`), and how many processes a launch has, when the
  launcher does not say (:data:`SIZE_VAR`);
* a launch id safe to put in a file name (:func:`safe_id`).

Batch systems' commands (qstat, qdel, scontrol, scancel, bkill) all run through
:func:`run_command`, with a deadline and a warning that says what failed.

Keeping them here keeps each plug-in a page long, and testable on fake environments.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Literal, overload

from .._errors import LauncherError

__all__ = [
    "ARRAY_INDICES_VAR",
    "COMMAND_TIMEOUT",
    "MPI_RANK_VARIABLES",
    "SIZE_VAR",
    "IndexSpan",
    "int_var",
    "mpi_disagreement",
    "mpi_launched",
    "parse_int",
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
#: Seconds allowed for a batch system's command (qstat, qdel, scontrol, scancel, bkill);
#: the controller may be busy.
COMMAND_TIMEOUT = 30.0

#: (rank variable, size variable, who sets it) of MPI launchers, in the order
#: they are trusted: MPICH/Hydra, Intel MPI and Cray PMI set PMI_*, Open MPI
#: OMPI_COMM_WORLD_*, PMIx launchers PMIX_RANK, MVAPICH2 MV2_COMM_WORLD_*.
MPI_RANK_VARIABLES: tuple[tuple[str, str | None, str], ...] = (
    ("PMI_RANK", "PMI_SIZE", "a PMI launcher: MPICH/Intel MPI mpiexec, or srun --mpi=pmi2"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("PMIX_RANK", None, "a PMIx launcher: Open MPI 5 mpirun, or srun --mpi=pmix"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MVAPICH2's mpirun_rsh"),
)


@overload
def int_var(environ: Mapping[str, str], name: str, system: str, *,
            required: Literal[True]) -> int: ...
@overload
def int_var(environ: Mapping[str, str], name: str, system: str, *,
            required: bool = False) -> int | None: ...
def int_var(environ: Mapping[str, str], name: str, system: str, *,
            required: bool = False) -> int | None:
    """The integer in variable ``name``, which ``system`` (a launcher, for messages) sets.

    None when it is unset or empty, unless ``required``; a LauncherError that
    names the variable, its value and the launcher, and says what to do, when
    it is missing but required or is not an integer.
    """
    text = environ.get(name, "").strip()
    if text == "":
        if not required:
            return None
        raise LauncherError(
            f"{name} is not set, but every {system} task has it: start the script through "
            f"{system}, or choose another launcher with launcher=... (HPCFUTURES_LAUNCHER)"
        )
    return parse_int(text, f"{name}={text!r}", system)


def parse_int(text: str, what: str, system: str) -> int:
    """``text`` (``what`` names it in the error: a variable, a field) as an integer."""
    try:
        return int(text.strip())
    except ValueError:
        raise LauncherError(
            f"{what} is not an integer; is this really a {system} task environment? "
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
    for rank_var, size_var, _ in MPI_RANK_VARIABLES:
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
    for rank_var, _, _ in MPI_RANK_VARIABLES:
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

    def has(self, index: int) -> bool:
        """Whether ``index`` is one of the span's indices."""
        return self.first <= index <= self.last and (index - self.first) % self.step == 0

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


def run_command(command: Sequence[str], purpose: str, *, otherwise: str = "",
                env: Mapping[str, str] | None = None,
                level: int = logging.WARNING) -> subprocess.CompletedProcess | None:
    """Run a batch-system command with a deadline; None (and a warning) if it failed.

    Used for chores that must not fail the launch: asking when a job was
    submitted, cancelling or deleting pending array elements.  The warning
    says what could not be done (``purpose``), why, and ``otherwise`` (what
    happens instead, or what the user can do); ``level`` is the log level of that
    warning (a question whose answer is optional asks for less).
    """
    shown = " ".join(command)
    try:
        result = subprocess.run(list(command), capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        why = f"'{shown}' did not finish within {COMMAND_TIMEOUT:g} s"
    except (OSError, subprocess.SubprocessError) as err:
        why = f"'{shown}' could not run ({err})"
    else:
        if result.returncode == 0:
            return result
        why = (f"'{shown}' failed with status {result.returncode}: "
               f"{result.stderr.strip() or '(no message)'}")
    logger.log(level, "could not %s: %s%s", purpose, why, f"; {otherwise}" if otherwise else "")
    return None
