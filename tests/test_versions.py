"""Issue 27: a checked environment.

The client, the scheduler and the workers must run the same Python minor
version and the same hpcfutures, distributed and cloudpickle; a difference is
one :class:`hpcfutures.VersionMismatchError` before the first call, naming both
sides, never a failure in the middle of a map.  Other versions are faked
through the test seam ``HPCFUTURES_FAKE_VERSIONS`` (the machine's second
interpreter has no Dask), set for a whole serving launch or for some of a
launch's worker ranks only.
"""

from __future__ import annotations

import json
import sys
import time

import cloudpickle
import distributed
import pytest
from helpers import hpcfutures_run
from pace import scaled
from test_allocate import _squeue, slurm_env  # noqa: F401 -- a fixture
from test_serve import Serving
from waiting import wait_until

import hpcfutures
from hpcfutures._support import environment
from hpcfutures.launchers import SchedulerInfo

JOB = "tests/jobs/versions_job.py"
HERE = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
FAKE = "python=3.9,cloudpickle=0.0.1"


def test_versions_are_this_processs_unless_the_seam_says_otherwise(monkeypatch):
    monkeypatch.delenv(environment.FAKE_VERSIONS_VARIABLE, raising=False)
    mine = environment.versions()
    assert mine == {"python": HERE.split()[1], "hpcfutures": hpcfutures.__version__,
                    "distributed": distributed.__version__,
                    "cloudpickle": cloudpickle.__version__}
    assert environment.mismatch("here", dict(mine), "there") is None
    monkeypatch.setenv(environment.FAKE_VERSIONS_VARIABLE, FAKE)
    assert environment.versions() == {**mine, "python": "3.9", "cloudpickle": "0.0.1"}


def test_a_mismatch_names_both_sides_and_what_to_do(monkeypatch):
    monkeypatch.delenv(environment.FAKE_VERSIONS_VARIABLE, raising=False)
    theirs = {**environment.versions(), "python": "3.12"}
    text = environment.mismatch("this client", theirs, "the scheduler of launch x on node7")
    assert text is not None and text.startswith(environment.MISMATCH_MARK)
    assert "the scheduler of launch x on node7 runs Python 3.12, hpcfutures" in text
    assert f"this client runs {HERE}, hpcfutures {hpcfutures.__version__}" in text
    assert "install the same versions on both sides" in text
    older = environment.mismatch("this client", {}, "the scheduler")
    assert older is not None and "older than this one's version check" in older


def test_the_scheduler_publishes_its_versions_and_import_path():
    info = SchedulerInfo(address="tcp://127.0.0.1:1", launch_id="x",
                         versions=environment.versions(), import_path=["/a", "/b"])
    again = SchedulerInfo.from_json(info.to_json())
    assert again.versions == info.versions and list(again.import_path) == ["/a", "/b"]
    old = json.loads(info.to_json())
    del old["versions"], old["import_path"]  # a file from before the check
    assert SchedulerInfo.from_json(json.dumps(old)).versions == {}


@pytest.mark.timeout(120)
def test_connect_to_a_launch_on_other_versions_is_refused_up_front(tmp_path):
    launch = Serving(tmp_path, 3, env={environment.FAKE_VERSIONS_VARIABLE: FAKE})
    try:
        launch.published()
        started = time.monotonic()
        with pytest.raises(hpcfutures.VersionMismatchError) as caught:
            hpcfutures.connect(launch.file)
        assert time.monotonic() - started < scaled(10)
        text = str(caught.value)
        assert "the scheduler of launch" in text, text
        assert "runs Python 3.9, hpcfutures" in text and "cloudpickle 0.0.1" in text, text
        assert f"this client runs {HERE}" in text, text
        assert f"cloudpickle {cloudpickle.__version__}" in text, text
        assert launch.process.poll() is None, "a refused client must not end the launch"
        hpcfutures.stop(launch.file)  # stopping needs no matching versions
        assert launch.wait(30) == 0, launch.output()
    finally:
        launch.close()


@pytest.mark.timeout(120)
def test_workers_on_other_versions_than_their_scheduler_are_one_error(tmp_path):
    job = hpcfutures_run(3, JOB, "2", timeout=90)
    assert "VERSIONS MAPPED" not in job.stdout, job
    line = next((line for line in job.stdout.splitlines()
                 if "[rank 1 client] VERSIONS MISMATCH" in line), "")
    assert "no worker could start" in line, job
    assert "rank 2 (worker)" in line and "runs Python 3.9, hpcfutures" in line, job
    assert "the scheduler of launch" in line and f"runs {HERE}" in line, job
    assert job.seconds < scaled(30), job


@pytest.mark.timeout(120)
def test_one_worker_on_other_versions_stays_out_and_the_others_serve(tmp_path):
    job = hpcfutures_run(4, JOB, "3", timeout=90)
    assert "VERSIONS MAPPED True" in job.stdout, job
    assert "rank 3 (worker)" in job.stdout + job.stderr, job
    assert "versions differ" in job.stdout + job.stderr, job


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_allocate_refuses_a_job_on_other_versions_and_cancels_it(tmp_path, slurm_env,  # noqa: F811
                                                                 monkeypatch):
    for name, value in slurm_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(environment.FAKE_VERSIONS_VARIABLE, raising=False)
    # Only the job's processes fake another Python (the client here is itself).
    faked = [f"#SBATCH --export=ALL,{environment.FAKE_VERSIONS_VARIABLE}=python=3.9"]
    with pytest.raises(hpcfutures.VersionMismatchError) as caught:
        hpcfutures.allocate(nodes=1, tasks_per_node=1, time="00:05:00", directives=faked,
                            job_dir=tmp_path / "jobs", timeout=60, job_name="hpcf-alloc-test")
    text = str(caught.value)
    assert "runs Python 3.9" in text and f"this client runs {HERE}" in text, text
    wait_until(lambda: _squeue("hpcf-alloc-test"), 30, "the refused job leaving the queue",
               done=lambda left: left == "")  # cancelled: COMPLETING for a moment
