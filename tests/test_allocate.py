"""``hpcfutures.allocate`` and ``hpcfutures submit``: batch scripts, and real jobs.

The script writers and the queue readers are checked as text in this process.
Against the local Slurm, from the host as a notebook would: one client process
allocates, maps, scales to 3 worker jobs and back, adapts, and sees its job die, while
``hpcfutures submit --wait`` runs the Monte Carlo example beside it; refusals,
queue timeouts and Ctrl-C are checked in this process (no job ever starts).
Against the local Grid Engine, as its unprivileged job user: allocate, map, leave.
Afterwards no job is left in the queue and no process is left behind.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import (
    MARKER_VAR,
    ROOT,
    assert_no_leftovers,
    require,
    run_job,
    slurm_is_up,
)
from test_sge import JOB_USER, cluster  # noqa: F401 -- cluster: test_sge's fixture

import hpcfutures
from hpcfutures._cli import main as cli
from hpcfutures._facade.outside import allocate as allocate_module
from hpcfutures._facade.outside.batchjob import adaptive_target
from hpcfutures.launchers._batchfind import get_batch_system
from hpcfutures.launchers._batchscript import (
    JobState,
    Request,
    memory_megabytes,
    parse_walltime,
)

FULL = Request(nodes=2, tasks_per_node=4, time=parse_walltime("1-01:02:03"), partition="debug",
               account="proj42", memory=memory_megabytes("16GB"), gpus=2, name="sim",
               output="/o/sim.out", directives=("#SITE --special",))


# ------------------------------------------------------------------ script text
EXPECTED = {
    "slurm": ["#SBATCH --job-name=sim", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
              "#SBATCH --time=1-01:02:03", "#SBATCH --partition=debug",
              "#SBATCH --account=proj42", "#SBATCH --mem=16384M", "#SBATCH --gpus-per-node=2",
              "#SBATCH --output=/o/sim.out", "#SITE --special", "srun python job.py"],
    "sge": ["#$ -S /bin/bash", "#$ -N sim", "#$ -V", "#$ -j y", "#$ -cwd", "#$ -pe mpi 8",
            "#$ -l h_rt=25:02:03", "#$ -q debug", "#$ -A proj42", "#$ -l h_vmem=4096M",
            "#$ -l gpu=2", "#$ -o /o/sim.out", "#SITE --special",
            "mpiexec -n 8 python job.py"],
    "pbs": ["#PBS -N sim", "#PBS -V", "#PBS -j oe",
            "#PBS -l select=2:ncpus=4:mpiprocs=4:mem=16384mb:ngpus=2",
            "#PBS -l walltime=25:02:03", "#PBS -q debug", "#PBS -A proj42", "#PBS -o /o/sim.out",
            "#SITE --special", 'cd "${PBS_O_WORKDIR:-.}"', "mpiexec -n 8 python job.py"],
    "lsf": ["#BSUB -J sim", "#BSUB -n 8", "#BSUB -R 'span[ptile=4]'", "#BSUB -W 25:02",
            "#BSUB -q debug", "#BSUB -P proj42", "#BSUB -R 'rusage[mem=16384]'",
            "#BSUB -gpu num=2", "#BSUB -o /o/sim.out", "#SITE --special",
            "mpiexec -n 8 python job.py"],
}


@pytest.mark.parametrize("system", sorted(EXPECTED))
def test_each_batch_script_says_the_request_in_its_own_words(system):
    script = get_batch_system(system).script(FULL, ["python", "job.py"], status_file="/o/s")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[1:-3] == EXPECTED[system]
    assert lines[-3:] == ["status=$?", 'echo "$status" > /o/s', 'exit "$status"']


def test_defaults_arrays_and_one_node_jobs():
    one = Request(tasks_per_node=3, array=4, name="w", parallel_environment="threads")
    slurm = get_batch_system("slurm").script(one, "python -m hpcfutures join F")
    assert "#SBATCH --array=0-3\n#SBATCH --open-mode=append\n" in slurm
    assert "--time" not in slurm and "--partition" not in slurm
    sge = get_batch_system("sge").script(one, "cmd", environment={"A": "x y"})
    # One node: the script's own process serves every slot (no mpiexec).
    assert sge.endswith("#$ -pe threads 3\n#$ -t 1-4\nexport A='x y'\ncmd\n")
    assert "#PBS -J 0-3" in get_batch_system("pbs").script(one, "cmd")
    assert "#PBS -J" not in get_batch_system("pbs").script(Request(array=1), "cmd")
    assert "#BSUB -J 'w[1-4]'" in get_batch_system("lsf").script(one, "cmd")


def test_times_memory_and_counts_are_checked():
    assert [parse_walltime(t) for t in ("1:00:00", "5:00", "2-0:0:1", 90, "2h", None)] == \
        [3600, 300, 172801, 90, 7200, None]
    assert [memory_megabytes(m) for m in ("4GB", "500M", "2GiB", 2**30, "1t")] == \
        [4096, 500, 2048, 1024, 2**20]
    for bad, call in (("1:2:3:4", parse_walltime), ("soon", parse_walltime),
                      ("lots", memory_megabytes), ("0GB", memory_megabytes)):
        with pytest.raises(ValueError):
            call(bad)
    with pytest.raises(ValueError, match="nodes must be a whole number"):
        Request(nodes=0)
    with pytest.raises(ValueError, match="batch_system must be one of slurm, sge, pbs, lsf"):
        get_batch_system("condor")


def _fake_qsub(folder: Path, says: str) -> Path:
    """A qsub (and qstat) that answer --version and -help as PBS's or Grid Engine's do."""
    folder.mkdir()
    for name in ("qsub", "qstat"):
        (folder / name).write_text(f"#!/bin/sh\necho '{says}'\n")
        (folder / name).chmod(0o755)
    return folder / "qsub"


def test_pbs_and_grid_engine_qsubs_are_told_apart(tmp_path, monkeypatch):
    """Both on PATH, in either order: each system uses its own qsub (and qstat, qdel)."""
    from hpcfutures._errors import AllocationError
    from hpcfutures.launchers._batchfind import detect_batch_system
    from hpcfutures.launchers._qsub import find_qsubs

    pbs = _fake_qsub(tmp_path / "pbs", "pbs_version = 23.06.06")
    sge = _fake_qsub(tmp_path / "sge", "SGE 8.1.9")
    for order in ([sge, pbs], [pbs, sge]):
        monkeypatch.setenv("PATH", os.pathsep.join(str(p.parent) for p in order))
        assert find_qsubs() == [(str(p), "pbs" if p == pbs else "sge") for p in order]
        assert get_batch_system("pbs").submit_command("j.sh") == [str(pbs), "j.sh"]
        assert get_batch_system("pbs").cancel_command("9") == [str(pbs.parent / "qdel"), "9"]
        assert get_batch_system("sge").submit_command("j.sh") == [str(sge), "-terse", "j.sh"]
        assert detect_batch_system().name == ("sge" if order[0] == sge else "pbs")
    # Only Grid Engine's: asking for PBS says what is here, and where PBS's usually is.
    monkeypatch.setenv("PATH", str(sge.parent))
    assert get_batch_system("pbs").script(Request(), "cmd")  # writing a script asks nothing
    with pytest.raises(AllocationError, match=(
            r"batch_system='pbs', but no qsub on PATH is PBS's: found Grid Engine \(.*/sge/"
            r"qsub\)\. Put PBS's bin directory on PATH \(often /opt/pbs/bin\)")):
        get_batch_system("pbs").submit_command("j.sh")


def test_the_real_grid_engine_qsub_says_whose_it_is():
    from hpcfutures.launchers._qsub import qsub_flavour

    require(bool(os.environ.get("SGE_ROOT")) or shutil.which("qconf") is not None,
            "Grid Engine's commands (bash ci/sge-up.sh)")
    assert qsub_flavour(shutil.which("qsub")) == "sge"


def _done(stdout="", stderr="", returncode=0):
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


def test_job_ids_and_queue_states_are_read_from_each_systems_answer():
    slurm, sge = get_batch_system("slurm"), get_batch_system("sge")
    pbs, lsf = get_batch_system("pbs"), get_batch_system("lsf")
    assert slurm.job_id("123;cluster\n") == "123"
    assert sge.job_id("456.1-3:1\n") == "456"
    assert pbs.job_id("789.server\n") == "789.server"
    assert lsf.job_id("Job <42> is submitted to queue <normal>.\n") == "42"
    assert slurm.read_state("1", _done("PENDING\nRUNNING\n")) is JobState.PENDING
    assert slurm.read_state("1", _done("RUNNING\nCOMPLETING\n")) is JobState.RUNNING
    assert slurm.read_state("1", _done("", "Invalid job id specified", 1)) is JobState.GONE
    listing = ("job-ID prior name user state\n-----\n"
               "  7 0.5 x u r 11/30/2026 1\n  8 0.5 y u qw 11/30/2026 1\n")
    assert sge.read_state("7", _done(listing)) is JobState.RUNNING
    assert sge.read_state("8", _done(listing)) is JobState.PENDING
    assert sge.read_state("9", _done(listing)) is JobState.GONE
    assert pbs.read_state("1", _done("    job_state = Q\n")) is JobState.PENDING
    assert pbs.read_state("1", _done("", "Unknown Job Id", 153)) is JobState.GONE
    assert lsf.read_state("1", _done("RUN\n")) is JobState.RUNNING
    assert lsf.read_state("1", _done("DONE\n")) is JobState.GONE


def test_adapt_grows_while_calls_wait_and_stays_within_bounds():
    assert adaptive_target(waiting=10, threads=2, jobs=1, minimum=0, maximum=4) == 2
    assert adaptive_target(waiting=10, threads=2, jobs=4, minimum=0, maximum=4) == 4
    assert adaptive_target(waiting=1, threads=2, jobs=3, minimum=0, maximum=4) == 3
    assert adaptive_target(waiting=0, threads=2, jobs=0, minimum=2, maximum=4) == 2


def test_submit_dry_run_prints_the_script(capsys):
    status = cli(["submit", "--batch-system", "sge", "-N", "2", "-n", "16", "-t", "1:00:00",
                  "--dry-run", "python", "job.py"])
    script = capsys.readouterr().out
    assert status == 0
    assert "#$ -N job\n" in script and "#$ -pe mpi 16\n" in script
    assert "mpiexec -n 16 python job.py\n" in script
    assert cli(["submit", "-N", "2", "-n", "3", "--dry-run", "python", "job.py"]) == 2
    assert "not a multiple of -N 2" in capsys.readouterr().err


def test_allocate_is_public():
    assert hpcfutures.allocate is allocate_module.allocate
    assert issubclass(hpcfutures.QueueTimeoutError, TimeoutError)
    assert issubclass(hpcfutures.AllocationError, hpcfutures.HPCFuturesError)


# ------------------------------------------------------ the real local Slurm
def _squeue(name: str) -> str:
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True,
                          text=True, timeout=30).stdout.strip()


@pytest.fixture
def slurm_env(tmp_path, monkeypatch):
    require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    marker = uuid.uuid4().hex
    env = {"HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60", MARKER_VAR: marker,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")]))}
    yield env
    subprocess.run(["scancel", "-n", "hpcf-alloc-test,hpcf-alloc-test-w"], capture_output=True,
                   timeout=30)  # only if the test failed
    assert_no_leftovers(marker, grace=20)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_allocate_scale_die_and_submit_wait_on_slurm(tmp_path, slurm_env):
    submit = subprocess.Popen(
        [sys.executable, "-m", "hpcfutures", "submit", "-n", "3", "-t", "10:00", "-J",
         "hpcf-alloc-test", "-o", str(tmp_path / "mc.out"), "--job-dir", str(tmp_path),
         "--wait", sys.executable, "examples/monte_carlo.py"],
        cwd=ROOT, env={**os.environ, **slurm_env}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        client = subprocess.run(
            [sys.executable, "tests/jobs/allocate_job.py", str(tmp_path), "full"], cwd=ROOT,
            env={**os.environ, **slurm_env}, capture_output=True, text=True, timeout=240)
        said = client.stdout + client.stderr
        outputs = "\n".join(f"--- {p}\n{p.read_text()}" for p in tmp_path.glob("*.out"))
        print(said)  # shown when the test fails, with the times of each step
        for check in ("map", "scaled_up", "scaled_down", "adapted", "died_with_not_serving"):
            assert f"PASS {check}" in said, (said, outputs)
        assert client.returncode == 0 and "ALLOCATE DONE" in said, (said, outputs)
        assert _squeue("hpcf-alloc-test-w") == "", "worker jobs left in the queue"
        out, _ = submit.communicate(timeout=180)
        assert submit.returncode == 0, (out, outputs)
        assert "submitted; output: " in out and "ended with exit status 0" in out, out
    finally:
        if not submit.stdout.closed:  # a check failed before the job's end was read
            submit.kill()
            submit.communicate()
    assert "pi ~= 3.1" in (tmp_path / "mc.out").read_text()
    assert _squeue("hpcf-alloc-test") == ""


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_allocate_notebook_example_on_slurm(slurm_env):
    """examples/allocate_notebook.py, run as a script on the login node (here: this
    machine, with the local Slurm): a job, two more worker jobs, nothing left queued."""
    job = run_job([sys.executable, "examples/allocate_notebook.py"], env=slurm_env,
                  timeout=240)
    assert job.returncode == 0, job
    assert re.search(r"pi ~= 3\.1\d* from 32 tasks", job.stdout), job
    assert re.search(r"^\d+ workers connected$", job.stdout, re.M), job
    assert _squeue("hpcfutures") == "" and _squeue("hpcfutures-w") == "", "jobs left queued"


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_refused_queued_too_long_and_interrupted_jobs_leave_the_queue(tmp_path, slurm_env,
                                                                      monkeypatch):
    for name, value in slurm_env.items():
        monkeypatch.setenv(name, value)
    common = {"job_dir": tmp_path, "job_name": "hpcf-alloc-test", "time": "5:00"}
    with pytest.raises(hpcfutures.AllocationError, match=r"Slurm refused the job.*partition"):
        hpcfutures.allocate(partition="no-such-partition", **common)
    never = ["#SBATCH --begin=now+3600"]  # pends forever, yet is a valid request
    with pytest.raises(hpcfutures.QueueTimeoutError, match="still queued after "
                       "queue_timeout=1 s, so it was cancelled"):
        hpcfutures.allocate(directives=never, queue_timeout=1, **common)
    assert _squeue("hpcf-alloc-test") == ""

    def interrupted(*args):
        assert "PENDING" in _squeue("hpcf-alloc-test")
        raise KeyboardInterrupt

    monkeypatch.setattr(allocate_module, "await_serving", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hpcfutures.allocate(directives=never, **common)
    assert _squeue("hpcf-alloc-test") == ""


# ------------------------------------------------------ the real local Grid Engine
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["basic", "components"])
def test_allocate_map_and_leave_on_grid_engine(cluster, mode):  # noqa: F811 -- the fixture
    """``components`` (issue 28): allocate(workers=[...]) where the batch system has no
    heterogeneous jobs submits each further component as a job whose task joins."""
    python, tree = cluster
    user = pwd.getpwnam(JOB_USER)
    out = Path(f"/tmp/hpcfutures-sge-allocate-{uuid.uuid4().hex[:8]}")
    out.mkdir()
    os.chown(out, user.pw_uid, user.pw_gid)
    marker = uuid.uuid4().hex
    env = {**os.environ, "HOME": user.pw_dir, "USER": JOB_USER, "LOGNAME": JOB_USER,
           "PYTHONPATH": str(tree), "HPCFUTURES_HOST": "127.0.0.1", "HPCFUTURES_TIMEOUT": "60",
           MARKER_VAR: marker}
    said = ""
    try:
        client = subprocess.run(
            ["runuser", "-u", JOB_USER, "--", python, "tests/jobs/allocate_job.py", str(out),
             mode], cwd=tree, env=env, capture_output=True, text=True, timeout=180)
        said = client.stdout + client.stderr
        print(said, *(f"--- {p}\n{p.read_text()}" for p in out.glob("*.out")))
        passed = "PASS map" if mode == "basic" else "PASS components workers=2 jobs=2"
        assert client.returncode == 0 and passed in said and "ALLOCATE DONE" in said
        listing = subprocess.run(["qstat", "-u", JOB_USER], capture_output=True, text=True,
                                 timeout=30).stdout
        for job in re.findall(r"ALLOCATE JOB (\d+)", said):
            assert job not in listing.split(), listing
    finally:
        for job in re.findall(r"ALLOCATE JOB (\d+)", said):  # only if the test failed
            subprocess.run(["qdel", job], capture_output=True, timeout=30)
        assert_no_leftovers(marker, grace=20)
        shutil.rmtree(out, ignore_errors=True)
