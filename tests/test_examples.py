"""Every example runs, under the launcher it is written for, so none can rot."""

import re
import sys

import pytest

from conftest import ROOT, hpcfutures_run, run_job

EXAMPLES = ROOT / "examples"


def check_pi(output: str) -> None:
    match = re.search(r"pi ~= (\d\.\d+)", output)
    assert match and abs(float(match.group(1)) - 3.14159) < 0.01, output


def check_sweep(output: str) -> None:
    assert "swept 20 dampings" in output, output


CASES = {"monte_carlo.py": check_pi, "parameter_sweep.py": check_sweep}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_on_the_laptop_default(name):
    job = run_job([sys.executable, EXAMPLES / name], timeout=90)
    assert job.returncode == 0, job
    CASES[name](job.stdout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_under_hpcfutures_run(name):
    job = hpcfutures_run(4, EXAMPLES / name, timeout=90)
    assert job.returncode == 0, job
    CASES[name](job.stdout)
    assert job.stdout.count("swept") + job.stdout.count("pi ~=") == 1, "printed by more than one rank"
