"""The "Writing your own launcher" example runs for real, through both registration routes.

``examples/custom_launcher`` holds a plug-in for a fictional "toy batch system"
(TOY_JOB_ID / TOY_TASK_ID / TOY_NTASKS) and a script that uses it.  Here the
test plays the batch system: it starts the copies itself, with those
variables, on loopback, under a deadline, and checks that none is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from helpers import MARKER_VAR, ROOT, assert_no_leftovers, kill_marked

CUSTOM = ROOT / "examples" / "custom_launcher"
#: Variables through which a real launcher could claim the test's subprocesses.
LAUNCHER_PREFIXES = ("HPCFUTURES_", "SLURM_", "PMI_", "PMIX_", "OMPI_", "MV2_", "FLUX_",
                     "PBS_", "LSB_", "JSM_", "SGE_", "PALS_", "ALPS_", "TOY_")


def clean_environment(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(extra)
    return env


def run_toy_job(size: int, tmp_path, timeout: float = 90) -> list[tuple[int, str, str]]:
    """Start ``size`` copies of job.py as the toy batch system would; (status, out, err) each."""
    marker = uuid.uuid4().hex
    job_id = f"test-{marker[:8]}"
    base = clean_environment(**{
        MARKER_VAR: marker,
        "TOY_JOB_ID": job_id,
        "TOY_NTASKS": str(size),
        "TOY_NNODES": "1",  # all copies on this host: the plug-in binds to loopback
        "HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
        "HPCFUTURES_TIMEOUT": "60",
    })
    logs, processes = [], []
    for rank in range(size):
        out, err = tmp_path / f"task{rank}.out", tmp_path / f"task{rank}.err"
        logs.append((out, err))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            processes.append(subprocess.Popen(
                [sys.executable, "job.py"], cwd=CUSTOM, env={**base, "TOY_TASK_ID": str(rank)},
                stdout=stdout, stderr=stderr, start_new_session=True))
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        kill_marked(marker)
        for process in processes:
            process.wait()
        pytest.fail(f"toy job still running after {timeout} s:\n{_report(processes, logs)}")
    results = [(p.returncode, out.read_text(), err.read_text())
               for p, (out, err) in zip(processes, logs, strict=True)]
    print(_report(processes, logs))  # shown by pytest if the test fails
    assert_no_leftovers(marker)
    return results


def _report(processes, logs) -> str:
    return "\n".join(f"--- task {rank}: status {p.returncode}\n{out.read_text()}{err.read_text()}"
                     for rank, (p, (out, err)) in enumerate(zip(processes, logs, strict=True)))


@pytest.mark.timeout(120)
def test_toy_launcher_example_runs_with_three_tasks(tmp_path):
    results = run_toy_job(3, tmp_path)
    assert [status for status, _, _ in results] == [0, 0, 0]
    outputs = "".join(out for _, out, _ in results)
    assert outputs.count("longest Collatz chain") == 1, "printed by more than the client"
    assert "longest Collatz chain below 10,000 starts at 6171 (261 steps)" in results[1][1]
    assert "toy task 2: starting a worker" in results[2][2], "the before_worker hook did not run"
    assert not list(tmp_path.glob("sched-*.json")), "the scheduler file was not removed"


def info(tmp_path, **env: str) -> dict:
    """``python -m hpcfutures info --json`` in a toy-system environment."""
    result = subprocess.run([sys.executable, "-m", "hpcfutures", "info", "--json"],
                            cwd=tmp_path, env=clean_environment(**env), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


TOY_CLIENT = {"TOY_JOB_ID": "42", "TOY_TASK_ID": "1", "TOY_NTASKS": "3", "TOY_NNODES": "1"}


@pytest.mark.timeout(120)
def test_launcher_named_by_module_and_class(tmp_path):
    report = info(tmp_path, **TOY_CLIENT, PYTHONPATH=os.pathsep.join([str(CUSTOM), str(ROOT)]),
                  HPCFUTURES_LAUNCHER="toy_launcher:ToyLauncher")
    assert (report["launcher"], report["rank"], report["size"], report["role"]) == (
        "toy", 1, 3, "client")
    assert report["launch_id"] == "toy-42"
    assert report["bind"] == "127.0.0.1"


@pytest.mark.timeout(120)
def test_launcher_registered_as_entry_point_is_detected(tmp_path):
    """An installed plug-in (here: a bare .dist-info on the path) takes part in detection."""
    site = tmp_path / "site"
    dist = site / "toy_launcher_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-launcher-plugin\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text("[hpcfutures.launchers]\n"
                                           "toy = toy_launcher:ToyLauncher\n")
    path = os.pathsep.join([str(site), str(CUSTOM), str(ROOT)])

    detected = info(tmp_path, **TOY_CLIENT, PYTHONPATH=path)
    assert (detected["launcher"], detected["role"]) == ("toy", "client")
    assert detected["why"][0] == "TOY_JOB_ID=42 is set: a task of a toy batch system job"

    by_name = info(tmp_path, **TOY_CLIENT, PYTHONPATH=path, HPCFUTURES_LAUNCHER="toy")
    assert by_name["launcher"] == "toy"

    elsewhere = info(tmp_path, PYTHONPATH=path)  # installed, but not a toy job
    assert elsewhere["launcher"] == "local"


def test_toy_identity_and_its_errors(monkeypatch):
    from hpcfutures import LauncherError
    from hpcfutures._support.config import resolve_settings

    monkeypatch.syspath_prepend(str(CUSTOM))
    from toy_launcher import ToyLauncher

    settings = resolve_settings(environ={}, dask_config={})
    assert ToyLauncher.detect({}) is None
    identity = ToyLauncher(settings, environ={"TOY_JOB_ID": "7", "TOY_TASK_ID": "2",
                                              "TOY_NTASKS": "4"}).identity()
    assert (identity.rank, identity.size, identity.launch_id) == (2, 4, "toy-7")
    assert identity.single_host is False and identity.fields == {"job_id": "7"}
    with pytest.raises(LauncherError, match="TOY_NTASKS"):
        ToyLauncher(settings, environ={"TOY_JOB_ID": "7", "TOY_TASK_ID": "2"}).identity()
    with pytest.raises(LauncherError, match="TOY_TASK_ID='two' is not an integer"):
        ToyLauncher(settings, environ={"TOY_JOB_ID": "7", "TOY_TASK_ID": "two",
                                       "TOY_NTASKS": "4"}).identity()


def test_launcher_paths_that_cannot_be_used_are_configuration_errors():
    from hpcfutures import ConfigurationError
    from hpcfutures.launchers import get_launcher
    from hpcfutures.launchers.run import RunLauncher

    assert get_launcher("hpcfutures.launchers.run:RunLauncher") is RunLauncher
    for spec, why in (("no_such_module_xyz:Launcher", "cannot be loaded"),
                      ("hpcfutures.launchers.run:NoSuchClass", "cannot be loaded"),
                      ("hpcfutures.launchers.run:launch_id_of", "not a subclass")):
        with pytest.raises(ConfigurationError, match=why):
            get_launcher(spec)
