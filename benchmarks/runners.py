"""The runners: each is one way of starting the workload, with what it needs to be available.

Every runner gives the client 2 single-threaded workers on 127.0.0.1, except the one on the
3-node cluster of ci/slurm-multinode-up.sh, whose workers run on two other nodes and listen
on the nodes' addresses.  A runner whose Python
package is missing is "not installed"; one whose launcher or hpcfutures plug-in is missing is
"not available"; both show as such in the table instead of failing the benchmark.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from .workload import CHUNKSIZE

__all__ = ["RUNNERS", "Runner", "base_env", "by_name"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JOBS = HERE / "jobs"
PY = sys.executable


@dataclasses.dataclass(frozen=True)
class Runner:
    """One way of running the workload."""

    name: str                               # for --only and the JSON
    title: str                              # for the table
    short: str                              # a column header in the targets table
    is_hpcfutures: bool
    argv: Callable[[float, str], list[str]]  # (timeout s, run id) -> command line
    needs: tuple[Callable[[], str | None], ...] = ()
    slurm: bool = False                     # started with srun or salloc: scancel on timeout
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # added to every run's
    cannot: tuple[str, ...] = ()            # steps it cannot do, and why (notes under the table)

    def unavailable(self) -> str | None:
        """Why this runner cannot run here ("not installed: ..." / "not available: ...")."""
        for check in self.needs:
            reason = check()
            if reason:
                return reason
        return None

    def command(self, timeout: float, run_id: str) -> list[str]:
        return self.argv(timeout, run_id)


# ----------------------------------------------------------------- availability
def _module(module: str, package: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"not installed: pip install {package}"
        return None
    return check


@functools.cache
def _slurm() -> str | None:
    if shutil.which("srun") is None:
        return "not available: no srun on PATH"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"not available: scontrol ping failed ({err})"
    if "UP" not in ping.stdout:
        return "not available: Slurm is not running (start it with: bash ci/slurm-up.sh)"
    return None


#: The 3-node cluster's configuration (ci/slurm-multinode-up.sh), and what its runs need: its
#: Slurm, and the nodes' own addresses rather than the loopback every other run binds to.
MULTINODE_ENV = {"SLURM_CONF": "/etc/hpcfutures-slurm-mn/slurm.conf", "HPCFUTURES_HOST": ""}


@functools.cache
def _slurm_multinode() -> str | None:
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10,
                              env={**os.environ, **MULTINODE_ENV})
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"not available: scontrol ping failed ({err})"
    if "UP" not in ping.stdout:
        return ("not available: the 3-node Slurm cluster is not running (start it with: "
                "bash ci/slurm-multinode-up.sh)")
    return None


@functools.cache
def _mpiexec() -> str | None:
    if shutil.which("mpiexec") is None:
        return "not available: no mpiexec on PATH (pip install mpich)"
    return None


@functools.cache
def _plugin(launcher: str) -> str | None:
    """The hpcfutures launcher plug-in imports (it may be missing or half-written)."""
    module = f"hpcfutures.launchers.{launcher}"
    try:
        probe = subprocess.run([PY, "-c", f"import {module}"], capture_output=True, text=True,
                               timeout=60, env=base_env(), cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"not available: importing {module} took over 60 s"
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or ["?"]
        return f"not available: {module} cannot be imported ({lines[-1][:120]})"
    return None


def _plugin_check(launcher: str) -> Callable[[], str | None]:
    return lambda: _plugin(launcher)


# ----------------------------------------------------------------- command lines
def _job(name: str) -> str:
    return str(JOBS / name)


def _minutes(timeout: float) -> str:
    return str(math.ceil(timeout / 60) + 1)  # Slurm ends the job even if we could not


def _srun(timeout: float, run_id: str) -> list[str]:
    return ["srun", "-n4", "-J", run_id, "-t", _minutes(timeout)]


def _salloc(timeout: float, run_id: str) -> list[str]:
    """An allocation of 2 CPUs whose command (the client) runs here, outside it."""
    return ["salloc", "-n2", "-J", run_id, "-t", _minutes(timeout)]


def _ignores_chunksize(which_map: str) -> tuple[str, ...]:
    return (f"chunksize={CHUNKSIZE} columns n/a: {which_map} ignores `chunksize`, so the "
            "chunked maps are not run",)


HPCFUTURES_JOB = _job("hpcfutures_job.py")
EXECUTORLIB_JOB = _job("executorlib_job.py")
EXECUTORLIB_MAP = "executorlib's `map` (`concurrent.futures.Executor.map`)"

RUNNERS: tuple[Runner, ...] = (
    Runner("hpcfutures-laptop", "hpcfutures, `python job.py` (Executor(2))", "laptop", True,
           lambda t, r: [PY, HPCFUTURES_JOB]),
    Runner("hpcfutures-run", "hpcfutures, `hpcfutures run -n 4`", "run -n 4", True,
           lambda t, r: [PY, "-m", "hpcfutures", "run", "-n", "4", PY, HPCFUTURES_JOB]),
    Runner("hpcfutures-srun", "hpcfutures, `srun -n4`", "srun -n4", True,
           lambda t, r: [*_srun(t, r), PY, HPCFUTURES_JOB],
           needs=(_slurm, _plugin_check("slurm")), slurm=True),
    Runner("hpcfutures-srun-3nodes", "hpcfutures, `srun -N3 -n4` on 3 nodes", "srun -N3 -n4",
           True, lambda t, r: [*_srun(t, r), "-N3", PY, HPCFUTURES_JOB],
           needs=(_slurm, _slurm_multinode, _plugin_check("slurm")), slurm=True,
           env=MULTINODE_ENV),
    Runner("hpcfutures-mpiexec", "hpcfutures, `mpiexec -n 4`", "mpiexec -n 4", True,
           lambda t, r: ["mpiexec", "-n", "4", PY, HPCFUTURES_JOB],
           needs=(_module("mpi4py", "mpi4py mpich"), _mpiexec, _plugin_check("mpi"))),
    Runner("hpcfutures-journal", "hpcfutures with `journal=`, `python job.py` (Executor(2))",
           "journal", True, lambda t, r: [PY, _job("hpcfutures_journal_job.py")]),
    Runner("hpcfutures-mpi-tasks", "hpcfutures MPI tasks, `mpiexec -n 4` (2-rank calls)",
           "MPI tasks", True,
           lambda t, r: ["mpiexec", "-n", "4", PY, _job("hpcfutures_mpi_tasks_job.py")],
           needs=(_module("mpi4py", "mpi4py mpich"), _mpiexec, _plugin_check("mpi"))),
    Runner("processpool", "ProcessPoolExecutor(2)", "ProcessPoolExecutor", False,
           lambda t, r: [PY, _job("processpool_job.py")]),
    Runner("mpi4py-futures", "mpi4py.futures, `mpiexec -n 3` (2 workers)", "mpi4py.futures",
           False,
           lambda t, r: ["mpiexec", "-n", "3", PY, "-m", "mpi4py.futures",
                         _job("mpi4py_job.py")],
           needs=(_module("mpi4py", "mpi4py mpich"), _mpiexec)),
    Runner("mpiexec-per-call", "`mpiexec -n 2` per 2-rank call", "mpiexec per call", False,
           lambda t, r: [PY, _job("mpiexec_per_call_job.py")],
           needs=(_module("mpi4py", "mpi4py mpich"), _mpiexec)),
    Runner("slurmrunner", "dask-jobqueue SLURMRunner, `srun -n4`", "SLURMRunner", False,
           lambda t, r: [*_srun(t, r), PY, _job("slurmrunner_job.py")],
           needs=(_module("dask_jobqueue", "dask-jobqueue"), _slurm), slurm=True,
           cannot=_ignores_chunksize("Dask's `ClientExecutor.map`")),
    Runner("dask-mpi", "dask-mpi, `mpiexec -n 4`", "dask-mpi", False,
           lambda t, r: ["mpiexec", "-n", "4", PY, _job("daskmpi_job.py")],
           needs=(_module("dask_mpi", "dask-mpi"), _module("mpi4py", "mpi4py mpich"),
                  _mpiexec),
           cannot=_ignores_chunksize("Dask's `ClientExecutor.map`")),
    Runner("parsl", "Parsl `ParslPoolExecutor`, HTEX on the local provider (2 workers)",
           "Parsl", False, lambda t, r: [PY, _job("parsl_job.py")],
           needs=(_module("parsl", "parsl"),),
           cannot=_ignores_chunksize("`ParslPoolExecutor.map`")),
    Runner("executorlib", "executorlib `SingleNodeExecutor(2, block_allocation=True)`",
           "executorlib", False, lambda t, r: [PY, EXECUTORLIB_JOB, "single"],
           needs=(_module("executorlib", "executorlib"),),
           cannot=_ignores_chunksize(EXECUTORLIB_MAP)),
    Runner("executorlib-slurm",
           "executorlib `SlurmJobExecutor(2, block_allocation=True)`, `salloc -n2`",
           "executorlib Slurm", False, lambda t, r: [*_salloc(t, r), PY, EXECUTORLIB_JOB, "slurm"],
           needs=(_module("executorlib", "executorlib"), _slurm), slurm=True,
           cannot=_ignores_chunksize(EXECUTORLIB_MAP)),
    Runner("executorlib-per-call", "executorlib `SingleNodeExecutor(2)` (a process per call)",
           "executorlib per call", False, lambda t, r: [PY, EXECUTORLIB_JOB, "per-call"],
           needs=(_module("executorlib", "executorlib"),),
           cannot=("only ready and the round trip (30 calls, not 300) are run: executorlib's "
                   "default starts a process for every call (0.2-0.25 s a call one at a time "
                   "here, ~12 calls/s on 2 workers), at which the other steps' 6,200 calls "
                   "would take 9 minutes or more; its total covers those two steps",)),
)


def by_name(names: list[str] | None) -> list[Runner]:
    """The runners named (all by default), in the table's order; unknown names raise ValueError."""
    if not names:
        return list(RUNNERS)
    known = {runner.name: runner for runner in RUNNERS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown runner(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [runner for runner in RUNNERS if runner.name in names]


def base_env(quick: bool = False) -> dict[str, str]:
    """Every run's environment: loopback only, single-threaded libraries, workload importable."""
    env = dict(os.environ)
    path = [str(ROOT), env.get("PYTHONPATH", "")]  # the jobs import benchmarks.workload
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, path)),
        "BENCH_QUICK": "1" if quick else "0",
        # everything on loopback
        "HPCFUTURES_HOST": "127.0.0.1",
        "UCX_NET_DEVICES": "lo",
        "HYDRA_IFACE": "lo",
        # single-threaded workers
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    })
    return env
