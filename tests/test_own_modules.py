"""Issue 27: the user's own modules travel by value with their functions.

A module only the client can import (a folder on the client's ``sys.path``
alone) is pickled by value with the function; installed packages still go by
reference.  For real: under ``hpcfutures run``, under ``srun`` on the local
Slurm, and through ``connect`` to an ``hpcfutures serve`` launch, the workers
never have the folder.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import cloudpickle
import pytest
import toolz
from helpers import ROOT, hpcfutures_run, require, run_job, slurm_is_up
from test_allocate import slurm_env  # noqa: F401 -- a fixture
from test_serve import Serving

import hpcfutures
from hpcfutures._remote import modules
from hpcfutures._remote.shipping import ShippedFunction

JOB = "tests/jobs/own_modules_job.py"

UTIL = """\
FACTOR = 3


def times(x):
    return x * FACTOR
"""

TOOL = """\
import hpcf_own_util
from hpcf_own_util import times


class ToolError(Exception):
    pass


class Box:
    def __init__(self, value):
        self.value = value


def scaled(x):
    return hpcf_own_util.times(x) + 1


def tripled(x):
    return times(x)


def fail(text):
    raise ToolError(text)


def boxed(x):
    return Box(x)
"""


def write_modules(folder) -> str:
    """The two modules of a user's folder; returns the folder."""
    folder.mkdir(exist_ok=True)
    (folder / "hpcf_own_util.py").write_text(UTIL)
    (folder / "hpcf_own_tool.py").write_text(TOOL)
    return str(folder)


@pytest.fixture
def own_modules(tmp_path, monkeypatch):
    """The user's modules imported in this process from a folder only it has."""
    folder = write_modules(tmp_path / "mine")
    monkeypatch.syspath_prepend(folder)
    import hpcf_own_tool

    yield hpcf_own_tool
    for name in ("hpcf_own_tool", "hpcf_own_util"):
        sys.modules.pop(name, None)


def loads_elsewhere(payload: bytes, *args) -> subprocess.CompletedProcess:
    """Load ``payload`` in a fresh interpreter that lacks the folder, and call it."""
    code = textwrap.dedent(f"""
        import pickle, sys
        fn = pickle.loads(sys.stdin.buffer.read())
        print(repr(fn(*{args!r})))
    """)
    ran = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True,
                         timeout=60, cwd=ROOT)
    return subprocess.CompletedProcess(ran.args, ran.returncode, ran.stdout.decode(),
                                       ran.stderr.decode())


# ------------------------------------------------------------------ the rule
def test_a_module_outside_the_launchs_path_travels_by_value(own_modules):
    owner = type("Owner", (), {})()  # a Dask client stands here
    modules.note_import_path(owner, sys.path[1:])  # the launch lacks the folder
    shipped = {module.__name__ for module in modules.to_ship(owner)}
    assert {"hpcf_own_tool", "hpcf_own_util"} <= shipped
    assert not shipped & {"toolz", "cloudpickle", "hpcfutures", "json", "pytest"}, shipped
    payload = ShippedFunction.of(own_modules.scaled, modules.to_ship(owner)).payload
    ran = loads_elsewhere(payload, 4)
    assert ran.returncode == 0 and ran.stdout.strip() == "13", ran
    # Registered for that one pickling only: the process's other pickling is unchanged.
    assert not {"hpcf_own_tool", "hpcf_own_util"} & cloudpickle.list_registry_pickle_by_value()


def test_without_the_mechanism_the_workers_cannot_load_it(own_modules):
    """What every peer's user meets (Parsl #2680, Dask #8695): by reference, the
    function names a module the other interpreter cannot import."""
    ran = loads_elsewhere(ShippedFunction.of(own_modules.scaled).payload, 4)
    assert ran.returncode != 0 and "No module named 'hpcf_own_tool'" in ran.stderr, ran


def test_a_module_on_the_launchs_path_and_installed_ones_go_by_reference(own_modules):
    owner = type("Owner", (), {})()
    modules.note_import_path(owner, sys.path)  # the launch imports from the folder too
    assert not {m.__name__ for m in modules.to_ship(owner)} & {"hpcf_own_tool",
                                                                "hpcf_own_util"}
    # An installed package's function, even with every module of the user's by value:
    by_value = modules.to_ship(None)
    assert "hpcf_own_tool" in {m.__name__ for m in by_value}
    for fn in (toolz.identity, hpcfutures.connect):
        payload = ShippedFunction.of(fn, by_value).payload
        assert payload == cloudpickle.dumps(fn), fn  # a name to import, no code
        assert fn.__module__.encode() in payload and len(payload) < 120, payload


def test_editable_installs_extensions_and_the_standard_library_are_not_the_users(
        own_modules, monkeypatch):
    import importlib.util
    import json
    import types

    folder = str(own_modules.__file__).rpartition("/")[0]
    assert modules._own_folder("hpcf_own_tool", own_modules) == folder
    for name, module in (("json", json), ("toolz", toolz), ("hpcfutures", hpcfutures)):
        assert modules._own_folder(name, module) is None, name
    extension = types.ModuleType("hpcf_fast")
    extension.__file__ = own_modules.__file__[:-3] + ".cpython-311-x86_64-linux-gnu.so"
    assert modules._own_folder("hpcf_fast", extension) is None

    class EditableFinder:  # as setuptools' ``pip install -e`` hook is named
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "hpcf_own_tool":
                return importlib.util.spec_from_file_location(name, own_modules.__file__)
            return None

    monkeypatch.setattr(sys, "meta_path", [EditableFinder, *sys.meta_path])
    assert modules._own_folder("hpcf_own_tool", own_modules) is None


# ------------------------------------------------------------------ for real
@pytest.mark.timeout(120)
def test_own_modules_under_hpcfutures_run(tmp_path):
    job = hpcfutures_run(3, JOB, write_modules(tmp_path / "mine"), timeout=90)
    assert job.returncode == 0 and job.stdout.count("OWN RESULT PASS") == 3, job


@pytest.mark.slurm
@pytest.mark.timeout(150)
def test_own_modules_under_srun(tmp_path):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    name = f"hpcf-test-{uuid.uuid4().hex[:10]}"
    env = {"HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
           "HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60"}
    try:
        job = run_job(["srun", "-n3", "-J", name, "python3", JOB,
                       write_modules(tmp_path / "mine")], env=env, timeout=120)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=30)
    assert job.returncode == 0 and job.stdout.count("OWN RESULT PASS") == 3, job


@pytest.mark.timeout(180)
def test_own_modules_through_connect_to_a_serving_launch(tmp_path, own_modules):
    launch = Serving(tmp_path, 3)
    try:
        launch.published()
        with hpcfutures.connect(launch.file) as ex:
            assert list(ex.map(own_modules.scaled, range(4))) == [1, 4, 7, 10]
            assert ex.submit(own_modules.tripled, 5).result(timeout=60) == 15
            error = ex.submit(own_modules.fail, "from the worker").exception(timeout=60)
            box = ex.submit(own_modules.boxed, 7).result(timeout=60)
        # The classes were shipped by value; the client's own classes come back.
        assert isinstance(box, own_modules.Box) and box.value == 7, box
        assert isinstance(error, own_modules.ToolError), repr(error)
        assert str(error) == "from the worker"
    finally:
        launch.close()


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_own_modules_through_allocate_on_slurm(tmp_path, slurm_env, monkeypatch,  # noqa: F811
                                               own_modules):
    for name, value in slurm_env.items():
        monkeypatch.setenv(name, value)
    with hpcfutures.allocate(nodes=1, tasks_per_node=1, time="00:05:00",
                             job_dir=tmp_path / "jobs", timeout=60,
                             job_name="hpcf-alloc-test") as ex:
        assert list(ex.map(own_modules.scaled, range(4))) == [1, 4, 7, 10]
        assert ex.submit(own_modules.tripled, 5).result(timeout=60) == 15
