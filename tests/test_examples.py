"""Every example runs, under the launcher it is written for, so none can rot."""

import re
import sys

import pytest
from helpers import ROOT, hpcfutures_run, require, run_job

EXAMPLES = ROOT / "examples"


def check_pi(output: str) -> None:
    match = re.search(r"pi ~= (\d\.\d+)", output)
    assert match and abs(float(match.group(1)) - 3.14159) < 0.01, output


def check_sweep(output: str) -> None:
    assert "swept 20 dampings" in output, output


def check_reduction(output: str) -> None:
    assert "tree reduction of 64 blocks" in output and "(correct)" in output, output


CASES = {"monte_carlo.py": check_pi, "parameter_sweep.py": check_sweep,
         "tree_reduction.py": check_reduction}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_on_the_laptop_default(name):
    job = run_job([sys.executable, EXAMPLES / name], timeout=90)
    assert job.returncode == 0, job
    CASES[name](job.stdout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(set(CASES) - {"tree_reduction.py"}))  # see test_release
def test_example_under_hpcfutures_run(name):
    job = hpcfutures_run(4, EXAMPLES / name, timeout=90)
    assert job.returncode == 0, job
    CASES[name](job.stdout)
    printed = sum(job.stdout.count(word) for word in ("swept", "pi ~=", "tree reduction"))
    assert printed == 1, "printed by more than one rank"


# Cubed supports Python 3.11 and later: on 3.10 this test does not apply (see conftest.py).
if sys.version_info >= (3, 11):
    @pytest.mark.timeout(120)
    @pytest.mark.parametrize("launch", ["python", "hpcfutures run -n 4"])
    def test_cubed_example(launch, tmp_path):
        """examples/cubed_slurm.py (needs the cubed extra; under srun: tests/test_cubed.py)."""
        import importlib.util

        require(importlib.util.find_spec("cubed") is not None, "cubed (pip install -e '.[cubed]')")
        env = {"CUBED_WORK_DIR": str(tmp_path)}
        if launch == "python":
            job = run_job([sys.executable, EXAMPLES / "cubed_slurm.py"], env=env, timeout=90)
        else:
            job = hpcfutures_run(4, EXAMPLES / "cubed_slurm.py", env=env, timeout=90)
        assert job.returncode == 0, job
        assert job.stdout.count("all results match NumPy") == 1, job


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sh")))
def test_batch_script_examples_are_valid_bash_with_a_python_body_that_compiles(script):
    """The batch-script examples run for minutes on a real queue (the requeue recipes are
    exercised by tests/test_draining.py and tests/test_sge.py with their own job files):
    here, at least, neither the shell nor an embedded Python body can rot unseen."""
    import subprocess

    path = EXAMPLES / script
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stderr
    body = re.search(r"<<'PY'\n(.*?)\nPY\n", path.read_text(), re.DOTALL)
    if body:
        compile(body.group(1), f"{script} (its Python)", "exec")


#: Examples that only the syntax check above runs, and why; their recipe is run elsewhere.
ONLY_CHECKED = {
    "slurm_requeue.sh": "minutes of Slurm time limits and requeue holds; its recipe runs in "
                        "tests/test_draining.py (a drained, requeued, resumed sbatch job)",
    "sge_requeue.sh": "minutes of h_rt limits; its recipe runs in tests/test_sge.py (an h_rt "
                      "job that drains, exits 99 and whose rerun completes every item)",
}


def test_every_example_is_run_by_some_test():
    """An example added without a test would rot unseen: each is named in a test file
    (or listed above, with the test that runs its recipe)."""
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").glob("test_*.py"))
    # Named in a string (a path or a parameter), not merely in a comment.
    untested = [entry.name for entry in sorted(EXAMPLES.iterdir())
                if not entry.name.startswith((".", "_")) and entry.name not in ONLY_CHECKED
                and not re.search(rf"[\"'/]{re.escape(entry.name)}[\"']", tests)]
    assert not untested, f"examples no test runs: {untested}"
