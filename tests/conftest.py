"""pytest's hooks for the suite; the shared machinery is in helpers.py (and waiting.py)."""

from __future__ import annotations

from helpers import FAILURE_TIMES


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
