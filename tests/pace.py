"""How much slower this machine runs now than the quiet one the tests' bounds were set on.

Every wall-clock bound in the suite (an assertion that something took less than
N s, a wait's deadline, a test's timeout) is ``scaled(N)``: N times the
slowdown factor, measured once when the test run starts by timing two
``python -c "import distributed"`` at once (CPU and file-system bound, several
processes at a time, as a launch's start is) against :data:`REFERENCE_IMPORT`,
their time on a quiet 2-core machine.  A run beside two busy processes measures
about 2 and waits twice as long; a quiet or faster machine measures 1 (bounds
are never tightened).  One import alone measured a loaded machine as a quiet one:
it got most of a core however busy the other was.

The factor travels in :data:`VARIABLE`, so the job scripts a test starts, and a
run that sets it by hand (``HPCFUTURES_TEST_SLOWDOWN=3 pytest``), use the same.
Standard library only: job scripts import it without pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

__all__ = ["REFERENCE_IMPORT", "TOGETHER", "VARIABLE", "measure", "scaled", "slowdown"]

VARIABLE = "HPCFUTURES_TEST_SLOWDOWN"
#: Seconds two ``python -c "import distributed"`` started together take on a quiet
#: 2-core machine (the median of three; Python 3.13, distributed 2026.8: 0.49-0.56 s).
REFERENCE_IMPORT = 0.55
#: Processes timed together: one per core of the reference machine.
TOGETHER = 2
#: Never more than this: a machine 10 times slower than CI is broken, not slow.
LARGEST = 6.0


def measure(python: str = sys.executable) -> float:
    """The slowdown factor now: the median of three timings of :data:`TOGETHER` imports
    started at once, against the reference."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        imports = [subprocess.Popen([python, "-c", "import distributed"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(TOGETHER)]
        if any(process.wait(timeout=120) != 0 for process in imports):
            return 1.0  # no distributed here: nothing to measure against
        times.append(time.perf_counter() - started)
    median = sorted(times)[1]
    return round(min(max(median / REFERENCE_IMPORT, 1.0), LARGEST), 2)


def slowdown() -> float:
    """The factor of this run (:data:`VARIABLE`, set when the run started); 1 if unset."""
    try:
        return max(float(os.environ.get(VARIABLE, "1")), 1.0)
    except ValueError:
        return 1.0


def scaled(seconds: float) -> float:
    """``seconds`` stretched by this run's slowdown factor."""
    return seconds * slowdown()
