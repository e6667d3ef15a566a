"""The env-only plug-ins (Grid Engine arrays, PBS, LSF, jsrun, Flux, PALS, ALPS) on environments.

No server of these systems runs here, so every plug-in is tested on the
environment its system gives a process -- each variable's source is noted
where the environment is built -- in two ways:

* in this process, against fake environments: identity, role, detection and
  the precedence between launchers (an srun inside Flux, mpiexec inside a job);
* end to end: the contract suite (tests/jobs/contract_job.py) run by N local
  processes that each get the environment of one rank laid on, so identity,
  scheduler file, shutdown and the end-of-launch hooks (qdel, bkill, through
  stand-in commands on PATH) all run for real.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import JOBS, MARKER_VAR, ROOT, assert_no_leftovers
from pace import scaled

from hpcfutures import LauncherError, NotEnoughRanksError
from hpcfutures._launch.plan import negotiate
from hpcfutures._launch.roles import Role
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import detect_launcher
from hpcfutures.launchers._batchenv import IndexSpan, parse_span, safe_id

N = 3  # scheduler, client, one worker


# ------------------------------------------------------------------ environments, with sources
def sge_array(i: int, n: int = N, job: str = "4242") -> dict[str, str]:
    """Task i+1 of 'qsub -t 1-n': measured on gridengine 8.1.9 (shared/SGE_NOTES.md)."""
    return {"JOB_ID": job, "SGE_TASK_ID": str(i + 1), "SGE_TASK_FIRST": "1",
            "SGE_TASK_LAST": str(n), "SGE_TASK_STEPSIZE": "1", "NSLOTS": "1", "NHOSTS": "1",
            "SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "default", "QUEUE": "all.q",
            "ENVIRONMENT": "BATCH", "JOB_NAME": "job.sh"}


def sge_job_script(slots: int = 4) -> dict[str, str]:
    """'qsub -pe smp 4 job.sh': non-array jobs see SGE_TASK_ID=undefined (SGE_NOTES.md)."""
    return {"JOB_ID": "77", "SGE_TASK_ID": "undefined", "SGE_TASK_FIRST": "undefined",
            "SGE_TASK_LAST": "undefined", "SGE_TASK_STEPSIZE": "undefined",
            "NSLOTS": str(slots), "NHOSTS": "1", "PE": "smp", "ENVIRONMENT": "BATCH"}


def pbs_pro_array(i: int, n: int = N, job: str = "4242") -> dict[str, str]:
    """Subjob i of 'qsub -J 0-(n-1)': PBS Professional user guide (PBS_ARRAY_INDEX, PBS_ARRAY_ID
    is the parent "1234[].server", PBS_JOBID the subjob "1234[7].server"; NCPUS per chunk)."""
    return {"PBS_JOBID": f"{job}[{i}].pbs1", "PBS_ARRAY_INDEX": str(i),
            "PBS_ARRAY_ID": f"{job}[].pbs1", "PBS_ENVIRONMENT": "PBS_BATCH", "NCPUS": "1",
            "PBS_O_WORKDIR": "/home/user"}


def torque_array(i: int, n: int = N, job: str = "4242") -> dict[str, str]:
    """Element i of Torque's 'qsub -t 0-(n-1)': PBS_ARRAYID, PBS_JOBID "1234[7].server"
    (Torque administrator guide, job environment; PBS_NUM_PPN from -l nodes=1:ppn=1)."""
    return {"PBS_JOBID": f"{job}[{i}].torque1", "PBS_ARRAYID": str(i), "PBS_NUM_PPN": "1",
            "PBS_ENVIRONMENT": "PBS_BATCH", "PBS_TASKNUM": "1", "PBS_VNODENUM": "0"}


def pbsdsh_task(i: int, n: int = N, job: str = "4242", nodefile: str = "") -> dict[str, str]:
    """Copy i of 'pbsdsh python job.py': pbsdsh(1B) names PBS_TASKNUM (the TM task id; 1 is the
    job script itself), PBS_NODENUM and PBS_VNODENUM; Torque sets PBS_NP and PBS_NODEFILE."""
    return {"PBS_JOBID": f"{job}.torque1", "PBS_TASKNUM": str(i + 2), "PBS_NODENUM": "0",
            "PBS_VNODENUM": str(i), "PBS_NP": str(n), "PBS_NODEFILE": nodefile,
            "PBS_ENVIRONMENT": "PBS_BATCH"}


def lsf_array(i: int, n: int = N, job: str = "4242") -> dict[str, str]:
    """Element i+1 of "bsub -J 'a[1-n]'": LSF 10.1 "Environment variables set for job
    execution" (LSB_JOBID, LSB_JOBINDEX; LSB_JOBINDEX_END/STEP as MPICH's LSF bootstrap lists)."""
    return {"LSB_JOBID": job, "LSB_JOBINDEX": str(i + 1), "LSB_JOBINDEX_END": str(n),
            "LSB_JOBINDEX_STEP": "1", "LSB_MCPU_HOSTS": "node1 1", "LSB_DJOB_NUMPROC": "1"}


def jsrun_task(i: int, n: int = N, job: str = "4242") -> dict[str, str]:
    """Task i of 'jsrun -n n': JSM_NAMESPACE_RANK/SIZE/LOCAL_RANK (IBM JSM, as PyTorch
    Lightning's LSFEnvironment reads them); jsrun starts tasks as PMIx clients (PMIX_*)."""
    return {"LSB_JOBID": job, "LSB_JOBINDEX": "0", "JSM_NAMESPACE_RANK": str(i),
            "JSM_NAMESPACE_SIZE": str(n), "JSM_NAMESPACE_LOCAL_RANK": str(i),
            "PMIX_RANK": str(i), "PMIX_NAMESPACE": f"jsm-{job}-1"}


def flux_task(i: int, n: int = N, job: str = "ƒ2bXhy9") -> dict[str, str]:
    """Task i of 'flux run -n n': flux-environment(7) (FLUX_JOB_ID in F58, FLUX_JOB_SIZE,
    FLUX_JOB_NNODES, FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID); its simple PMI sets PMI_RANK/SIZE."""
    return {"FLUX_JOB_ID": job, "FLUX_JOB_SIZE": str(n), "FLUX_JOB_NNODES": "1",
            "FLUX_TASK_RANK": str(i), "FLUX_TASK_LOCAL_ID": str(i), "FLUX_URI": "local:///x",
            "PMI_RANK": str(i), "PMI_SIZE": str(n)}


def pals_rank(i: int, n: int = N, apid: str = "7c1d-4242") -> dict[str, str]:
    """Rank i of PALS' 'mpiexec -n n': the variables Slurm's mpi/cray_shasta and flux-coral2's
    cray-pals plug-ins set to imitate PALS (PALS_RANKID, PALS_LOCAL_RANKID, PALS_NODEID,
    PALS_APID, PALS_DEPTH... and Cray PMI's PMI_RANK, PMI_SIZE, PMI_LOCAL_SIZE)."""
    return {"PALS_RANKID": str(i), "PALS_LOCAL_RANKID": str(i), "PALS_NODEID": "0",
            "PALS_APID": apid, "PALS_LOCAL_SIZE": str(n), "PALS_DEPTH": "1",
            "PMI_RANK": str(i), "PMI_SIZE": str(n), "PMI_LOCAL_SIZE": str(n),
            "PBS_JOBID": "4242.pbs1"}


def alps_pe(i: int, n: int = N, app: str = "424242") -> dict[str, str]:
    """PE i of 'aprun -n n -d 1': ALPS_APP_PE, ALPS_APP_ID, ALPS_APP_DEPTH (as HPX's ALPS batch
    environment reads them); the world size comes from Cray PMI's PMI_SIZE."""
    return {"ALPS_APP_PE": str(i), "ALPS_APP_ID": app, "ALPS_APP_DEPTH": "1",
            "PMI_SIZE": str(n), "PBS_JOBID": "4242.sdb"}


def plan(env: dict[str, str], **options):
    return negotiate(resolve_settings(options, environ=env, dask_config={}), env)


# ------------------------------------------------------------------ identities on environments
def test_sge_array_task_rank_size_threads_and_launch():
    element = plan({**sge_array(1, 4, job="11"), "NSLOTS": "2", "PE": "smp"})
    assert element.launcher.name == "sge" and element.role is Role.CLIENT
    assert (element.identity.rank, element.identity.size, element.identity.threads) == (1, 4, 2)
    assert element.identity.launch_id == "sge-11-array"
    assert not element.identity.single_host
    assert "scheduler-sge-11-array.json" in element.exchange.description


def test_sge_array_with_a_step_counts_ranks_from_the_first_index():
    env = {**sge_array(0, job="12"), "SGE_TASK_FIRST": "3", "SGE_TASK_LAST": "11",
           "SGE_TASK_STEPSIZE": "2", "SGE_TASK_ID": "7"}
    identity = plan(env).identity
    assert (identity.rank, identity.size) == (2, 5)


def test_sge_job_script_is_standalone_on_its_slots():
    job = plan(sge_job_script(slots=4))
    assert job.launcher.name == "sge" and job.role is Role.STANDALONE
    assert job.identity.local_workers == 4 and job.exchange is None


def test_sge_array_too_small_says_how_to_submit():
    with pytest.raises(NotEnoughRanksError, match=r"qsub -t 1-3"):
        plan(sge_array(0, 2))


def test_pbs_pro_array_reads_its_range_from_the_user_or_from_qstat(tmp_path, monkeypatch):
    with_range = plan({**pbs_pro_array(2, 8), "HPCFUTURES_ARRAY_INDICES": "0-7", "NCPUS": "4"})
    assert (with_range.identity.rank, with_range.identity.size) == (2, 8)
    assert with_range.identity.threads == 4
    assert with_range.identity.launch_id == "pbs-4242_.pbs1-array"
    # No range given: asked of the server, as 'qstat -f' prints it (PBS Professional reference)
    fake = _fake_commands(tmp_path, qstat_f="    array_indices_submitted = 1-8\n")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    asked = plan({**pbs_pro_array(0), "PBS_ARRAY_INDEX": "3"}).identity
    assert (asked.rank, asked.size) == (2, 8)
    assert "qstat -f 4242[].pbs1" in (tmp_path / "calls.log").read_text()


def test_pbs_array_without_any_range_says_what_to_set(tmp_path, monkeypatch):
    fake = _fake_commands(tmp_path)  # a qstat that knows nothing
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(LauncherError, match="HPCFUTURES_ARRAY_INDICES=0-7"):
        plan(pbs_pro_array(0))


def test_torque_array_derives_the_array_id_from_its_job_id():
    identity = plan({**torque_array(1), "HPCFUTURES_ARRAY_INDICES": "0-2"}).identity
    assert (identity.rank, identity.size) == (1, 3)
    assert identity.launch_id == "pbs-4242_.torque1-array"


def test_pbsdsh_task_and_the_job_script_around_it(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("node1\nnode1\nnode1\n")
    task = plan(pbsdsh_task(2, 3, nodefile=str(nodefile)))
    assert task.launcher.name == "pbs" and task.role is Role.WORKER
    assert (task.identity.rank, task.identity.size, task.identity.single_host) == (2, 3, True)
    script = plan(torque_array(0) | {"PBS_ARRAYID": "", "PBS_JOBID": "99.torque1"})
    assert script.role is Role.STANDALONE and script.identity.local_workers == 1


def test_lsf_array_assumes_index_1_unless_told():
    default = plan(lsf_array(1, 8)).identity
    assert (default.rank, default.size, default.launch_id) == (1, 8, "lsf-4242-array")
    stepped = plan({**lsf_array(0), "LSB_JOBINDEX": "5", "LSB_JOBINDEX_END": "8",
                    "LSB_JOBINDEX_STEP": "2"}).identity
    assert (stepped.rank, stepped.size) == (2, 4)  # indices 1, 3, 5, 7
    told = plan({**lsf_array(0), "LSB_JOBINDEX": "6", "HPCFUTURES_ARRAY_INDICES": "5-12"}).identity
    assert (told.rank, told.size) == (1, 8)
    with pytest.raises(LauncherError, match="HPCFUTURES_ARRAY_INDICES"):
        plan({**lsf_array(0), "LSB_JOBINDEX": "20", "LSB_JOBINDEX_END": "12"})


def test_lsf_job_script_is_standalone_with_this_hosts_slots():
    script = plan({"LSB_JOBID": "9", "LSB_JOBINDEX": "0", "LSB_MCPU_HOSTS": "hostA 6 hostB 6"})
    assert script.role is Role.STANDALONE and script.identity.local_workers == 6


def test_task_launchers_number_their_tasks():
    for env, name, launch in ((jsrun_task(1), "jsrun", "jsrun-jsm-4242-1"),
                              (flux_task(1), "flux", "flux-f2bXhy9"),
                              (pals_rank(1), "pals", "pals-7c1d-4242"),
                              (alps_pe(1), "alps", "alps-424242")):
        got = plan(env)
        assert (got.launcher.name, got.role, got.identity.launch_id) == (name, Role.CLIENT, launch)
        assert got.identity.size == N


def test_flux_prefers_the_id_path_of_nested_instances():
    identity = plan({**flux_task(0), "FLUX_JOB_ID_PATH": "/ƒA1/ƒB2"}).identity
    assert identity.launch_id == "flux-fA1_fB2"


def test_launchers_without_a_size_variable_ask_for_hpcfutures_size():
    env = {k: v for k, v in alps_pe(0).items() if k != "PMI_SIZE"}
    with pytest.raises(LauncherError, match="HPCFUTURES_SIZE"):
        plan(env)
    assert plan({**env, "HPCFUTURES_SIZE": "4"}).identity.size == 4


def test_threads_from_the_launchers_depth():
    assert plan({**alps_pe(2), "ALPS_APP_DEPTH": "4"}).identity.threads == 4
    assert plan({**pals_rank(2), "PALS_DEPTH": "8"}).identity.threads == 8


# ------------------------------------------------------------------ precedence
SLURM_STEP = {"SLURM_JOB_ID": "55", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
              "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}
SLURM_BATCH = {"SLURM_JOB_ID": "55", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "1"}
MPIEXEC_RANK_2_OF_4 = {"PMI_RANK": "2", "PMI_SIZE": "4"}  # MPICH Hydra's mpiexec


@pytest.mark.parametrize("env, expected", [
    pytest.param(sge_array(1), "sge", id="sge-array"),
    pytest.param(sge_job_script(), "sge", id="sge-job-script"),
    pytest.param({**sge_job_script(), "PE": "mpi", **MPIEXEC_RANK_2_OF_4}, "mpi",
                 id="mpiexec-in-sge-parallel-environment"),
    pytest.param({**sge_array(1), "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
                 "mpi", id="open-mpi-mpirun-in-sge-array-element"),
    pytest.param(pbs_pro_array(1), "pbs", id="pbs-array"),
    pytest.param({"PBS_JOBID": "5.pbs1", **MPIEXEC_RANK_2_OF_4}, "mpi", id="mpiexec-in-pbs-job"),
    pytest.param(pals_rank(1), "pals", id="pals-mpiexec-in-pbs-job"),
    pytest.param(pbsdsh_task(1), "pbs", id="pbsdsh-task"),
    pytest.param(lsf_array(1), "lsf", id="lsf-array"),
    pytest.param({"LSB_JOBID": "5", "LSB_JOBINDEX": "0", **MPIEXEC_RANK_2_OF_4}, "mpi",
                 id="mpirun-in-lsf-job"),
    pytest.param(jsrun_task(1), "jsrun", id="jsrun-in-lsf-job"),
    pytest.param({**SLURM_STEP, **flux_task(2)}, "flux", id="flux-tasks-in-an-srun-step"),
    pytest.param({**flux_task(1), **MPIEXEC_RANK_2_OF_4}, "mpi", id="mpiexec-in-a-flux-task"),
    pytest.param({**SLURM_BATCH, **alps_pe(1)}, "alps", id="aprun-in-slurm-batch-script"),
    pytest.param({**SLURM_BATCH, "SLURM_ARRAY_JOB_ID": "55", "SLURM_ARRAY_TASK_ID": "1",
                  "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3",
                  "SLURM_ARRAY_TASK_COUNT": "4", **SLURM_STEP}, "slurm",
                 id="srun-inside-sbatch-array"),
    pytest.param({**pbs_pro_array(1), "HPCFUTURES_RANK": "0", "HPCFUTURES_SIZE": "2",
                  "HPCFUTURES_LAUNCH_ID": "x"}, "run", id="hpcfutures-run-in-pbs-job"),
    pytest.param({"JOB_ID": "5"}, "local", id="a-stray-JOB_ID-is-not-grid-engine"),
])
def test_detection_precedence(env, expected):
    cls, reason = detect_launcher(env)
    assert cls.name == expected, reason
    assert reason


def test_hpcfutures_info_says_which_launcher_and_why():
    env = {**_clean_environ(), **pbs_pro_array(1), "HPCFUTURES_ARRAY_INDICES": "0-3",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "hpcfutures", "info"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "launcher: pbs" in done.stdout and "role: client" in done.stdout
    assert "PBS job 4242[].pbs1: this process is its job array element" in done.stdout
    assert "rank 1 of 4 from PBS_ARRAY_INDEX=1 in the range 0-3" in done.stdout


def test_helpers():
    assert parse_span("1-15:2", "x") == IndexSpan(1, 15, 2) and IndexSpan(1, 15, 2).size == 8
    assert parse_span("4", "x").size == 1
    with pytest.raises(LauncherError):
        parse_span("0,2,3", "x")
    assert safe_id("ƒ2bX/y z") == "f2bX_y_z"


def _fake(directory: Path, name: str, status: int, output: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.out").write_text(output)
    script = directory / name
    script.write_text(f"#!/bin/bash\ncat {directory}/{name}.out\nexit {status}\n")
    script.chmod(0o755)


@pytest.mark.parametrize("status, said, gone", [
    (0, "JobId=7 ArrayTaskId=0 JobState=PENDING Reason=JobHeldUser", None),
    (0, "JobId=7 ArrayTaskId=0 JobState=RUNNING Reason=None RunTime=00:01:02", None),
    (0, "JobId=7 ArrayTaskId=0 JobState=CANCELLED Reason=None RunTime=00:00:00",
     "is CANCELLED, without ever starting (7_0)"),
    (0, "JobId=7 ArrayTaskId=0 JobState=FAILED Reason=NonZeroExitCode RunTime=00:00:04",
     "is FAILED (NonZeroExitCode) (7_0)"),
    (1, "Job 7_0 not found", "is unknown to Slurm"),
    (1, "slurm_load_jobs error: Invalid job id specified", "is unknown to Slurm"),
    (1, "slurm_load_jobs error: Unable to contact slurm controller", None),  # cannot tell
])
def test_slurm_says_whether_the_schedulers_element_is_gone(tmp_path, monkeypatch, status,
                                                           said, gone):
    from hpcfutures.launchers._slurm_array import element_gone

    _fake(tmp_path / "bin", "scontrol", status, said)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    found = element_gone("7", 0)
    assert found == gone if gone is None else gone in found


def test_grid_engine_says_whether_the_schedulers_task_is_gone(tmp_path, monkeypatch):
    from hpcfutures.launchers.sge import task_gone

    listing = SGE_PENDING.replace("<queue_info></queue_info>", (
        "<queue_info><job_list state='running'><JB_job_number>{job}</JB_job_number>"
        "<tasks>2</tasks></job_list></queue_info>")).format(job="42")
    _fake(tmp_path / "bin", "qstat", 0, listing)  # 42: task 2 running, 4-6 pending
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert task_gone("42", 2) is None and task_gone("42", 5) is None
    assert "no longer pending or running in Grid Engine (task 42.1" in task_gone("42", 1)
    _fake(tmp_path / "bin", "qstat", 1, "error: failed receiving gdi request")
    assert task_gone("42", 1) is None  # qstat cannot tell: keep waiting


def test_an_array_element_stops_waiting_once_the_schedulers_element_is_gone(tmp_path,
                                                                            monkeypatch):
    from hpcfutures.launchers import _slurm_array

    monkeypatch.setattr(_slurm_array, "ELEMENT_FIRST_CHECK", 0.2)
    asked = []

    def gone(job, index):
        asked.append((job, index))
        return None if len(asked) < 2 else "is CANCELLED (7_0)"

    monkeypatch.setattr(_slurm_array, "element_gone", gone)
    monkeypatch.setattr(_slurm_array, "ELEMENT_CHECK_EVERY", 0.2)
    exchange = _slurm_array.ArrayFileExchange(tmp_path / "s.json", "slurm-7-array", 2,
                                              array_job_id="7", scheduler_index=0)
    started = time.monotonic()
    with pytest.raises(LauncherError, match=r"job array 7 \(index 0, rank 0\) is CANCELLED"):
        exchange.lookup(30)
    assert time.monotonic() - started < scaled(5) and asked == [("7", 0), ("7", 0)]


# ------------------------------------------------------------------ end to end
#: name -> (environment of rank i, extra settings): each world runs the whole contract suite.
WORLDS = {
    "sge-array": (sge_array, {"HPCFUTURES_HOST": "127.0.0.1"}),
    "pbs-pro-array": (pbs_pro_array, {"HPCFUTURES_HOST": "127.0.0.1"}),  # range from qstat
    "pbsdsh": (pbsdsh_task, {}),  # one host in PBS_NODEFILE: loopback by itself
    "lsf-array": (lsf_array, {"HPCFUTURES_HOST": "127.0.0.1"}),
    "jsrun": (jsrun_task, {"HPCFUTURES_HOST": "127.0.0.1"}),
    "flux": (flux_task, {}),       # FLUX_JOB_NNODES=1: loopback by itself
    "pals": (pals_rank, {}),       # PALS_LOCAL_SIZE = size: loopback by itself
    "alps": (alps_pe, {"HPCFUTURES_HOST": "127.0.0.1"}),
}
#: Worlds running at once: each is N Dask processes on a 2-core machine.
PARALLEL = int(os.environ.get("HPCFUTURES_TEST_PARALLEL_WORLDS", "3"))
WORLD_DEADLINE = 120.0


def _clean_environ() -> dict[str, str]:
    """This process's environment without any launcher's variables."""
    prefixes = ("SLURM_", "PMI_", "PMIX_", "OMPI_", "HPCFUTURES_", "FLUX_", "PBS_", "LSB_",
                "JSM_", "PALS_", "ALPS_", "SGE_", "MPI_")
    return {k: v for k, v in os.environ.items()
            if not k.startswith(prefixes) and k not in ("JOB_ID", "NSLOTS")}


def _fake_commands(directory: Path, qstat_f: str = "", pending_xml: str = "") -> Path:
    """qstat/qdel/bkill stand-ins that log their arguments to directory/calls.log."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    (directory / "qstat-f.txt").write_text(qstat_f)
    (directory / "qstat-pending.xml").write_text(pending_xml)
    log = directory / "calls.log"
    for name, body in (
        ("qstat", f'case "$1" in -f) cat {directory}/qstat-f.txt ;; '
                  f'-s) cat {directory}/qstat-pending.xml ;; *) exit 1 ;; esac'),
        ("qdel", "true"),
        ("bkill", "true"),
    ):
        script = bin_dir / name
        script.write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n{body}\n')
        script.chmod(0o755)
    return bin_dir


SGE_PENDING = """<?xml version='1.0'?>
<job_info><queue_info></queue_info><job_info>
 <job_list state="pending"><JB_job_number>{job}</JB_job_number><state>qw</state>
  <tasks>4-6:1</tasks></job_list>
 <job_list state="pending"><JB_job_number>99999</JB_job_number><state>qw</state>
  <tasks>1-2:1</tasks></job_list>
</job_info></job_info>
"""


def _run_world(name: str, base: Path) -> dict:
    """Start N copies of contract_job.py, rank i with world ``name``'s environment of rank i."""
    build, extra = WORLDS[name]
    directory = base / name
    directory.mkdir()
    job = str(int(time.time() * 1000) % 10**9)  # unique: no scheduler file of an earlier run
    nodefile = directory / "nodefile"
    nodefile.write_text("localhost\n" * N)
    fake = _fake_commands(directory, qstat_f=f"    array_indices_submitted = 0-{N - 1}\n",
                          pending_xml=SGE_PENDING.format(job=job))
    marker = uuid.uuid4().hex
    common = {**_clean_environ(), **extra, MARKER_VAR: marker, "PYTHONPATH": str(ROOT),
              "PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}",
              "HPCFUTURES_SCHEDULER_FILE": str(directory / "scheduler-{launch_id}.json"),
              "HPCFUTURES_TIMEOUT": "60", "HPCFUTURES_ARRAY_TIMEOUT": "60"}
    processes = []
    launch = f"ƒ{job}" if build is flux_task else job  # Flux ids are F58
    for rank in range(N):
        kwargs = {"nodefile": str(nodefile)} if build is pbsdsh_task else {}
        env = {**common, **build(rank, N, launch, **kwargs)}
        processes.append(subprocess.Popen(
            [sys.executable, str(JOBS / "contract_job.py")], env=env, cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
    started, outputs = time.monotonic(), []
    for process in processes:
        try:
            outputs.append(process.communicate(
                timeout=max(1.0, WORLD_DEADLINE - (time.monotonic() - started))))
        except subprocess.TimeoutExpired:
            for other in processes:
                if other.poll() is None:
                    os.killpg(other.pid, signal.SIGKILL)
            outputs.append(process.communicate())
    calls = (directory / "calls.log").read_text() if (directory / "calls.log").exists() else ""
    return {"job": job, "marker": marker, "calls": calls, "seconds": time.monotonic() - started,
            "statuses": [p.returncode for p in processes], "outputs": outputs}


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    base = tmp_path_factory.mktemp("worlds")
    with cf.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = {name: pool.submit(_run_world, name, base) for name in WORLDS}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(WORLDS))
def test_contract_suite_on_each_environment(worlds, name):
    world = worlds[name]
    report = "\n".join(f"--- rank {rank} (status {status})\n{out}\n{err[-3000:]}"
                       for rank, (status, (out, err)) in
                       enumerate(zip(world["statuses"], world["outputs"], strict=True)))
    client = world["outputs"][1][0]
    assert "CONTRACT RESULT" in client and "FAIL " not in client, report
    assert world["statuses"] == [0] * N, report
    assert_no_leftovers(world["marker"])
    if name == "sge-array":  # the client deleted the array's pending tasks, and only those
        assert f"qdel {world['job']} -t 4-6:1" in world["calls"], world["calls"]
        assert "99999" not in world["calls"]
    if name == "lsf-array":
        assert f"bkill -stat pend {world['job']}" in world["calls"], world["calls"]
    if name == "pbs-pro-array":  # no range in the environment: asked of the server
        assert f"qstat -f {world['job']}[].pbs1" in world["calls"], world["calls"]
