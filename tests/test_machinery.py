"""The suite's own machinery: bounds stretched by the slowdown factor, other libraries'
output set aside, every test in one tier."""

import subprocess
import sys

import pace
from helpers import ROOT, own_lines


def test_a_bound_is_stretched_by_the_runs_slowdown_factor(monkeypatch):
    monkeypatch.setenv(pace.VARIABLE, "2.5")
    assert pace.scaled(4) == 10.0
    monkeypatch.setenv(pace.VARIABLE, "0.5")  # a fast machine never tightens a bound
    assert pace.scaled(4) == 4.0
    monkeypatch.setenv(pace.VARIABLE, "soon")
    assert pace.scaled(4) == 4.0


def test_dask_records_and_their_tracebacks_are_not_ours():
    said = "\n".join([
        "[rank 1 client] RESULT 3",
        "2026-12-06 03:00:00,000 [rank 2 worker] WARNING distributed.worker: Compute Failed",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "KeyError: 3",
        "2026-12-06 03:00:00,100 - distributed.core - INFO - Connection lost",
        "[rank 1 client] 2026-12-06 03:00:01,000 [rank 1 client] WARNING hpcfutures: a worker "
        "left",
        "Task exception was never retrieved",
        "future: <Task finished coro=<f()>>",
        "Traceback (most recent call last):",
        "asyncio.exceptions.CancelledError",
        "DONE",
    ])
    assert own_lines(said).splitlines() == [
        "[rank 1 client] RESULT 3",
        "[rank 1 client] 2026-12-06 03:00:01,000 [rank 1 client] WARNING hpcfutures: a worker "
        "left",
        "DONE",
    ]


def test_every_test_has_a_tier():
    """conftest.py gives each test one marker (tier1, tier2 or slow), so ``-m "not slow"``
    (tiers 1 and 2) and ``-m slow`` split the suite with nothing left over."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "not tier1 and not tier2 and not slow"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "no tests collected" in done.stdout, done.stdout[-2000:]
