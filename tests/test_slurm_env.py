"""The Slurm plug-in on fake task environments: no Slurm needed.

The variables are the ones Slurm 22.05 sets (see ci/SLURM_FACTS.md): an
``srun`` task has SLURM_STEP_ID, the batch script does not, and array
elements add SLURM_ARRAY_*.
"""

import subprocess
import time

import pytest

from hpcfutures import ConfigurationError, LauncherError, NotEnoughRanksError
from hpcfutures._errors import LaunchFinished
from hpcfutures._launch.plan import bind_address, negotiate
from hpcfutures._launch.roles import Role
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import SchedulerInfo, _slurm_array, detect_launcher
from hpcfutures.launchers._schedfile import JobFileExchange
from hpcfutures.launchers._slurm_array import ArrayFileExchange
from hpcfutures.launchers._slurm_env import expand_counts, memory_bytes
from hpcfutures.launchers.slurm import SlurmLauncher

MiB = 2**20


def settings(**explicit):
    return resolve_settings(explicit, environ={}, dask_config={})


def step_env(rank=0, size=4, job="42", step="0", nodes=1, **extra):
    """What ``srun -n<size>`` gives task ``rank`` (one node unless told)."""
    per_node = size // nodes
    return {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_CLUSTER_NAME": "lab",
        "SLURM_STEP_ID": step, "SLURM_STEPID": step, "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(size), "SLURM_STEP_NUM_TASKS": str(size),
        "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID": str(rank // per_node),
        "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(size),
        **extra,
    }


def batch_env(ntasks="8", **extra):
    """What the batch script of ``sbatch -n<ntasks>`` sees: no step."""
    return {"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": ntasks,
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_CPUS_ON_NODE": "8",
            "SLURM_TASKS_PER_NODE": ntasks, **extra}


def array_env(index, first=0, last=3, step=1, job="70", **extra):
    count = (last - first) // step + 1
    return {"SLURM_JOB_ID": str(100 + index), "SLURM_CLUSTER_NAME": "lab",
            "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
            "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(index),
            "SLURM_ARRAY_TASK_MIN": str(first), "SLURM_ARRAY_TASK_MAX": str(last),
            "SLURM_ARRAY_TASK_STEP": str(step), "SLURM_ARRAY_TASK_COUNT": str(count),
            **extra}


def identity(env, **explicit):
    return SlurmLauncher(settings(**explicit), env).identity()


# ---------------------------------------------------------------- srun steps
def test_srun_step_is_detected_and_gives_roles_from_procid():
    plans = [negotiate(settings(), step_env(rank, 4)) for rank in range(4)]
    assert [p.launcher.name for p in plans] == ["slurm"] * 4
    assert [p.role for p in plans] == [Role.SCHEDULER, Role.CLIENT, Role.WORKER, Role.WORKER]
    assert {p.identity.launch_id for p in plans} == {"slurm-lab-42.0"}
    assert "SLURM_STEP_ID" in plans[0].reason
    assert plans[0].exchange.path.name == "scheduler-slurm-lab-42.0.json"


def test_a_step_leaves_an_end_marker_that_sends_a_late_rank_home(tmp_path, monkeypatch):
    """Ranks of a step start seconds apart: one that starts after the client finished
    finds the "finished" marker and exits 0, instead of waiting out the start-up timeout
    for a scheduler file the scheduler deleted and failing a launch that succeeded."""
    monkeypatch.setattr(_slurm_array, "submit_time", lambda job: time.time() - 60)
    where = settings(scheduler_file=str(tmp_path / "s-{launch_id}.json"))
    scheduler, late = (negotiate(where, step_env(rank, 4)).exchange for rank in (0, 3))
    assert isinstance(late, JobFileExchange) and late.tombstone and late.job_id == "42"
    published = SchedulerInfo(address="tcp://127.0.0.1:1", launch_id="slurm-lab-42.0")
    scheduler.publish(published)
    scheduler.finish(published)
    with pytest.raises(LaunchFinished):
        late.lookup(timeout=5)


def test_two_steps_and_two_clusters_never_share_a_launch():
    ids = {identity(step_env(job=job, step=step, SLURM_CLUSTER_NAME=cluster)).launch_id
           for job, step, cluster in [("42", "0", "a"), ("42", "1", "a"), ("42", "0", "b")]}
    assert len(ids) == 3


def test_scheduler_file_template_takes_job_and_step():
    exchange = negotiate(settings(scheduler_file="/shared/fs/dask-slurm-{job_id}.json"),
                         step_env(rank=2)).exchange
    assert str(exchange.path) == "/shared/fs/dask-slurm-42.json"
    template = "/scratch/{user}/{cluster}-{job_id}.{step_id}.json"
    exchange = negotiate(settings(scheduler_file=template), step_env(rank=2, step="3")).exchange
    assert exchange.path.name == "lab-42.3.json"
    with pytest.raises(ConfigurationError, match="array_task"):
        negotiate(settings(scheduler_file="/x/{array_task}.json"), step_env(rank=2))


def test_one_task_step_runs_standalone_on_the_steps_cpus():
    plan = negotiate(settings(), step_env(0, 1, SLURM_CPUS_PER_TASK="3"))
    assert plan.role is Role.STANDALONE and plan.exchange is None
    assert plan.identity.local_workers == 3
    assert plan.identity.threads is None  # one thread per local worker


def test_too_few_tasks_say_how_many_to_ask_srun_for():
    with pytest.raises(NotEnoughRanksError, match=r"srun -n3"):
        negotiate(settings(), step_env(0, 2))
    assert negotiate(settings(scheduler_in_client=True), step_env(0, 2)).role is Role.CLIENT


def test_one_node_binds_to_loopback_and_several_nodes_do_not():
    one = identity(step_env(rank=3, size=4))
    many = identity(step_env(rank=3, size=4, nodes=2))
    assert one.single_host and bind_address(settings(), one) == ("127.0.0.1", None)
    assert not many.single_host and bind_address(settings(), many) == (None, None)
    assert bind_address(settings(interface="ib0"), many) == (None, "ib0")
    assert many.local_rank == 1


# ------------------------------------------------------------- batch script
def test_batch_script_without_srun_is_one_process_whatever_ntasks_says():
    plan = negotiate(settings(), batch_env(ntasks="8"))
    assert plan.launcher.name == "slurm" and plan.role is Role.STANDALONE
    assert plan.identity.size == 1 and plan.identity.local_workers == 8
    assert "SLURM_STEP_ID is not" in plan.reason
    assert any("SLURM_NTASKS=8" in why for why in plan.identity.reasons)


def test_batch_script_on_several_nodes_warns_that_they_stay_idle(caplog):
    identity(batch_env(SLURM_JOB_NUM_NODES="3"))
    assert "other 2 node(s) stay idle" in caplog.text and "srun" in caplog.text


def test_special_step_ids_are_not_srun_steps():
    env = {**batch_env(), "SLURM_STEP_ID": str(0xFFFFFFFE)}  # "batch" on some versions
    assert identity(env).size == 1


# -------------------------------------------------------------- resources
def test_threads_come_from_cpus_per_task():
    assert identity(step_env(rank=2, SLURM_CPUS_PER_TASK="2")).threads == 2
    assert identity(step_env(rank=2)).threads is None


def test_memory_per_cpu_is_multiplied_by_the_tasks_cpus():
    env = step_env(rank=2, SLURM_CPUS_PER_TASK="2", SLURM_MEM_PER_CPU="1000")
    assert identity(env).memory_limit == 2000 * MiB
    assert identity(env, threads_per_worker=3).memory_limit == 3000 * MiB


def test_memory_per_node_is_shared_by_the_tasks_on_the_node():
    assert identity(step_env(rank=2, SLURM_MEM_PER_NODE="4000")).memory_limit == 1000 * MiB
    two_nodes = step_env(rank=3, size=4, nodes=2, SLURM_MEM_PER_NODE="4G")
    assert identity(two_nodes).memory_limit == 2 * 2**30
    assert identity(step_env(rank=2)).memory_limit is None
    assert identity(step_env(rank=2, SLURM_MEM_PER_NODE="0")).memory_limit is None


def test_batch_script_shares_memory_among_its_local_workers():
    plan = negotiate(settings(), batch_env(SLURM_MEM_PER_NODE="8000"))
    assert plan.identity.memory_limit == 1000 * MiB  # 8 CPUs -> 8 local workers
    plan = negotiate(settings(max_workers=2), batch_env(SLURM_MEM_PER_NODE="8000"))
    assert plan.identity.memory_limit == 4000 * MiB


def test_slurm_memory_sizes():
    assert memory_bytes("X", "4000") == 4000 * MiB
    assert memory_bytes("X", "4G") == 4 * 2**30 and memory_bytes("X", "512K") == 512 * 1024
    with pytest.raises(LauncherError, match="X='lots'"):
        memory_bytes("X", "lots")


def test_task_lists_expand():
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert expand_counts("4") == [4]
    with pytest.raises(LauncherError):
        expand_counts("2(y3)")


def test_worker_gpus_are_its_share_of_the_step_gpus():
    """Issue 28: the 2 workers of 4 ranks on the node split the step's 4 GPUs."""
    from hpcfutures._launch.worker_side import gpus_of_worker

    env = step_env(rank=3, SLURM_STEP_GPUS="0,1,2,3", SLURM_GTIDS="0,1,2,3")
    assert gpus_of_worker(settings(), negotiate(settings(), env).identity, env).ids == ("2", "3")
    two_nodes = step_env(rank=5, size=8, nodes=2, CUDA_VISIBLE_DEVICES="0,1",
                         SLURM_GTIDS="4,5,6,7")  # four workers on the second node
    assert gpus_of_worker(settings(), negotiate(settings(), two_nodes).identity,
                          two_nodes).ids == ("1",)


# ---------------------------------------------------------------- job arrays
def test_array_elements_are_ranks_counted_from_the_first_index():
    plans = [negotiate(settings(), array_env(i, first=10, last=13)) for i in range(10, 14)]
    assert [p.identity.rank for p in plans] == [0, 1, 2, 3]
    assert [p.role for p in plans] == [Role.SCHEDULER, Role.CLIENT, Role.WORKER, Role.WORKER]
    assert {p.identity.launch_id for p in plans} == {"slurm-lab-70-array"}
    assert all(isinstance(p.exchange, ArrayFileExchange) and p.exchange.tombstone
               for p in plans)
    assert "SLURM_ARRAY_JOB_ID" in plans[0].reason
    assert not plans[0].identity.single_host  # elements may land on different nodes


def test_array_with_a_step_and_srun_inside_elements():
    assert identity(array_env(7, first=1, last=7, step=2)).rank == 3
    one_task_srun = {**array_env(2), **{"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}}
    assert identity(one_task_srun).launch_id == "slurm-lab-70-array"
    wide_srun = {**array_env(2), **step_env(rank=1, size=4, job="102")}
    assert identity(wide_srun).launch_id == "slurm-lab-102.0"  # each element its own launch


def test_array_file_is_keyed_by_the_array_job_id():
    plan = negotiate(settings(scheduler_file="/fs/dask-{job_id}.json"), array_env(3))
    assert str(plan.exchange.path) == "/fs/dask-70.json"


def test_irregular_arrays_and_small_arrays_are_refused_with_advice():
    irregular = {**array_env(2), "SLURM_ARRAY_TASK_COUNT": "3"}  # --array=0,2,3
    with pytest.raises(LauncherError, match="--array=FIRST-LAST"):
        identity(irregular)
    with pytest.raises(NotEnoughRanksError, match=r"--array=0-2"):
        identity(array_env(0, last=1))
    assert identity(array_env(0, last=0)).size == 1  # one element: standalone


def test_array_elements_wait_for_each_other_with_the_array_timeout():
    launcher = SlurmLauncher(settings(timeout=5, array_timeout=7200), array_env(2))
    assert launcher.lookup_timeout(launcher.identity()) == 7200
    launcher = SlurmLauncher(settings(timeout=5, array_timeout=7200), step_env(2))
    assert launcher.lookup_timeout(launcher.identity()) == 5


def test_client_cancels_pending_elements_only_for_arrays(monkeypatch):
    commands = []
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(
                            cmd, 0, "", ""))
    for env in (array_env(1), step_env(1)):
        launcher = SlurmLauncher(settings(), env)
        launcher.client_finished(launcher.identity(), 0)
    assert commands == [["scancel", "--state=PENDING", "70"]]


def test_cancelling_without_scancel_only_warns(monkeypatch, caplog):
    monkeypatch.setenv("PATH", "/nonexistent")
    _slurm_array.cancel_pending("70")
    assert "cancel them yourself" in caplog.text


def array_exchange(tmp_path, monkeypatch, submitted):
    monkeypatch.setattr(_slurm_array, "submit_time", lambda job: submitted)
    return ArrayFileExchange(tmp_path / "s.json", "slurm-lab-70-array", rank=2,
                             array_job_id="70")


def test_end_marker_of_this_array_sends_late_elements_home(tmp_path, monkeypatch):
    exchange = array_exchange(tmp_path, monkeypatch, submitted=time.time() - 60)
    published = SchedulerInfo(address="tcp://127.0.0.1:1", launch_id=exchange.launch_id)
    exchange.publish(published)
    exchange.finish(published)
    with pytest.raises(LaunchFinished):
        exchange.lookup(timeout=1)


def test_end_marker_older_than_the_array_is_from_a_reused_job_id(tmp_path, monkeypatch):
    exchange = array_exchange(tmp_path, monkeypatch, submitted=time.time())
    old = SchedulerInfo(address="", launch_id=exchange.launch_id, finished=True,
                        created=time.time() - 3600)
    (tmp_path / "s.json").write_text(old.to_json())
    (tmp_path / "s.json").chmod(0o600)
    with pytest.raises(TimeoutError, match="earlier array with the same job id 70"):
        exchange.lookup(timeout=0.3)


def test_end_marker_is_trusted_when_slurm_cannot_be_asked(tmp_path, monkeypatch):
    exchange = array_exchange(tmp_path, monkeypatch, submitted=None)
    old = SchedulerInfo(address="", launch_id=exchange.launch_id, finished=True,
                        created=time.time() - 3600)
    (tmp_path / "s.json").write_text(old.to_json())
    (tmp_path / "s.json").chmod(0o600)
    with pytest.raises(LaunchFinished):
        exchange.lookup(timeout=1)


# ----------------------------------------------------- other launchers' turf
def test_mpiexec_inside_a_job_is_left_to_the_mpi_plugin():
    hydra_under_srun = step_env(rank=0, size=1, PMI_RANK="3", PMI_SIZE="8")
    assert SlurmLauncher.detect(hydra_under_srun) is None
    assert SlurmLauncher.detect(batch_env(OMPI_COMM_WORLD_RANK="1",
                                          OMPI_COMM_WORLD_SIZE="4")) is None
    with pytest.raises(LauncherError, match="MPIExecutor"):
        identity(hydra_under_srun)


def test_srun_with_pmi_agrees_with_slurm_and_stays_slurm():
    env = step_env(rank=2, size=4, PMI_RANK="2", PMI_SIZE="4", PMIX_RANK="2")
    assert SlurmLauncher.detect(env)
    assert identity(env).rank == 2


def test_hpcfutures_run_inside_a_job_is_the_local_launcher():
    env = {**step_env(rank=0, size=1), "HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "3",
           "HPCFUTURES_LAUNCH_ID": "abc"}
    assert detect_launcher(env)[0].name == "run"


def test_slurm_executor_outside_slurm_says_what_to_do():
    with pytest.raises(LauncherError, match=r"SLURM_JOB_ID is not set.*srun or sbatch"):
        negotiate(settings(launcher="slurm"), {})
    assert SlurmLauncher.detect({}) is None


def test_garbled_variables_are_named():
    with pytest.raises(LauncherError, match="SLURM_PROCID='x'"):
        identity(step_env(SLURM_PROCID="x"))
