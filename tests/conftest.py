"""pytest's hooks and shared fixtures; the shared machinery is in helpers.py (and waiting.py)."""

from __future__ import annotations

import sys

import pytest
from helpers import (
    FAILURE_TIMES,
    LAUNCHERS,
    Batch,
    Launch,
    assert_no_leftovers,
    have_mpi,
    require,
    slurm_is_up,
)


@pytest.fixture
def batch(tmp_path, env):
    """sbatch for one test, with the test module's ``env``; its jobs are cancelled,
    shown (when the test failed) and checked for leftover processes after it."""
    jobs = Batch(tmp_path, env)
    yield jobs
    jobs.cancel_all()
    print(jobs.outputs())
    assert_no_leftovers(jobs.marker, grace=15)


def pytest_terminal_summary(terminalreporter) -> None:
    """The failure matrix's measured times, one row per fault, one column per launcher."""
    if not FAILURE_TIMES:
        return
    order = ["laptop", "run", "srun", "mpiexec"]
    launchers = sorted({launcher for _, launcher, _ in FAILURE_TIMES},
                       key=lambda name: (order.index(name) if name in order else 9, name))
    rows: dict[str, dict[str, float]] = {}
    for row, launcher, seconds in FAILURE_TIMES:
        rows.setdefault(row, {})[launcher] = seconds
    write = terminalreporter.write_line
    terminalreporter.section("failure matrix: seconds from the fault to its outcome")
    write("| fault | " + " | ".join(launchers) + " |")
    write("|---|" + "---|" * len(launchers))
    for row, times in rows.items():
        cells = [f"{times[name]:.2f}" if name in times else "" for name in launchers]
        write(f"| {row} | " + " | ".join(cells) + " |")


@pytest.fixture(params=LAUNCHERS)
def launcher(request) -> str:
    if request.param == "srun":
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    if request.param == "mpiexec":
        require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    return request.param


@pytest.fixture
def launches():
    """Launches of one test; each is ended, shown and checked for leftovers after it."""
    started: list[Launch] = []

    def start(*args, **kwargs) -> Launch:
        started.append(Launch(*args, **kwargs))
        return started[-1]

    yield start
    for launch in started:
        launch.close()


# Cubed supports Python 3.11 and later (pyproject.toml installs it there only): on 3.10
# its tests do not apply, so they are not collected rather than skipped or failed.
collect_ignore = ["test_cubed.py"] if sys.version_info < (3, 11) else []
