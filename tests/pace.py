"""How much slower this machine runs now than the quiet one the tests' bounds were set on.

Every wall-clock bound in the suite (an assertion that something took less than
N s, a wait's deadline, a test's timeout) is ``scaled(N)``: N times the
slowdown factor, measured once when the test run starts by timing
``python -c "import distributed"`` (CPU and file-system bound, as a launch's
start is) against :data:`REFERENCE_IMPORT`, its time on a quiet 2-core CI
machine.  A run beside two busy processes measures about 2 and waits twice as
long; a quiet or faster machine measures 1 (bounds are never tightened).

The factor travels in :data:`VARIABLE`, so the job scripts a test starts, and a
run that sets it by hand (``HPCFUTURES_TEST_SLOWDOWN=3 pytest``), use the same.
Standard library only: job scripts import it without pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

__all__ = ["REFERENCE_IMPORT", "VARIABLE", "measure", "scaled", "slowdown"]

VARIABLE = "HPCFUTURES_TEST_SLOWDOWN"
#: Seconds ``python -c "import distributed"`` takes on a quiet 2-core machine (the best
#: of three, Python 3.13, distributed 2026.8; 3.10 with the floor's 2025.9 is as fast).
REFERENCE_IMPORT = 0.7
#: Never more than this: a machine 10 times slower than CI is broken, not slow.
LARGEST = 6.0


def measure(python: str = sys.executable) -> float:
    """The slowdown factor now: the best of three timed imports against the reference."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        done = subprocess.run([python, "-c", "import distributed"], capture_output=True,
                              timeout=120)
        if done.returncode != 0:
            return 1.0  # no distributed here: nothing to measure against
        best = min(best, time.perf_counter() - started)
    return round(min(max(best / REFERENCE_IMPORT, 1.0), LARGEST), 2)


def slowdown() -> float:
    """The factor of this run (:data:`VARIABLE`, set when the run started); 1 if unset."""
    try:
        return max(float(os.environ.get(VARIABLE, "1")), 1.0)
    except ValueError:
        return 1.0


def scaled(seconds: float) -> float:
    """``seconds`` stretched by this run's slowdown factor."""
    return seconds * slowdown()
