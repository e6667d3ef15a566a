"""Across nodes: the 3-node Slurm cluster of ci/slurm-multinode-up.sh.

Each node mn1..mn3 has its own network namespace, hostname and address
10.77.0.1N, so 127.0.0.1 is per node, as on a real cluster: nothing here binds
to loopback; each launch finds the nodes' routable addresses by itself, and
traffic goes only to loopback or 10.77.0.x.  The nodes share this machine's
kernel, so the leftover check (processes carrying the test's marker, found in
/proc) sees the job steps on every node too.

Skipped on a laptop without the cluster; under CI=true a missing cluster fails.
Sized for 3 nodes x 2 CPUs on 2 real cores: at most 6 tasks per test.  Every
Slurm command of these tests goes to this cluster (SLURM_CONF); each test
cancels the jobs it started.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    JOBS,
    LiveJob,
    contract_passed,
    have_command,
    http_answers,
    listening,
    outsider_refused,
    own_lines,
    processes_with_marker,
    record_failure_time,
    require,
    run_job,
    wait_until,
)
from pace import scaled

pytestmark = [pytest.mark.multinode, pytest.mark.slurm]

MN_CONF = "/etc/hpcfutures-slurm-mn/slurm.conf"
NODES = ("mn1", "mn2", "mn3")
JOB = str(JOBS / "multinode_job.py")
#: MPI between the nodes over TCP on each node's own link (eth0), UCX's choice printed.
#: Shared memory is excluded: UCX takes it between processes of one kernel, which would
#: carry MPI between these "nodes" without crossing any network.  UCX_NET_DEVICES: with
#: every device (loopback too) a rank's UCX address is long enough that MPICH 5.0's
#: start-up segments can reach Slurm's pmi2 full-size and be read malformed ("value not
#: properly terminated"; docs/troubleshooting.rst), which a longer scheduler-file path in
#: the environment was enough to bring about, every time.
MPI_OVER_TCP = {"UCX_TLS": "^sm,cma", "UCX_NET_DEVICES": "eth0", "UCX_PROTO_INFO": "y"}
DASK_FALLBACK_WARNING = "Couldn't detect a suitable IP address"


#: Node states (sinfo's %T) of a node that runs jobs, now or once the jobs ahead end.
#: ``planned``: idle, but held by the backfill scheduler for a job that waits for more
#: nodes (a heterogeneous job waits so for the GPU node).
TAKES_JOBS = {"idle", "mixed", "allocated", "completing", "planned"}


def node_states() -> dict[str, str]:
    """Each node's state as sinfo reports it ("no answer: ..." for every node when the
    controller does not answer); a trailing ``*`` means the node does not respond."""
    if not (have_command("sinfo") and Path(MN_CONF).exists()):
        return dict.fromkeys(NODES, f"no sinfo or no {MN_CONF}")
    try:
        result = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                                text=True, timeout=20, env={**os.environ, "SLURM_CONF": MN_CONF})
    except (OSError, subprocess.SubprocessError) as error:
        return dict.fromkeys(NODES, f"no answer: {error}")
    if result.returncode != 0:
        return dict.fromkeys(NODES, f"no answer: {result.stderr.strip()}")
    states = dict(line.split(maxsplit=1) for line in result.stdout.splitlines() if line.strip())
    return {node: states.get(node, "not in sinfo") for node in NODES}


def takes_jobs(states: dict[str, str]) -> bool:
    """Every node takes jobs (one that missed a ping, ``idle*``, is taken as it is)."""
    return all(state.rstrip("*") in TAKES_JOBS for state in states.values())


@pytest.fixture(scope="module", autouse=True)
def cluster():
    states = node_states()
    require(takes_jobs(states),
            f"the 3-node Slurm cluster (bash ci/slurm-multinode-up.sh; nodes now: {states})")


@pytest.fixture(autouse=True)
def this_cluster(monkeypatch):
    """srun, sbatch, scontrol and scancel, here and in the jobs, reach the 3-node cluster."""
    monkeypatch.setenv("SLURM_CONF", MN_CONF)


@pytest.fixture
def env(tmp_path):
    """Routable addresses (no HPCFUTURES_HOST), scheduler files in tmp_path, short deadlines."""
    return {"HPCFUTURES_HOST": "", "HPCFUTURES_INTERFACE": "",
            "HPCFUTURES_SCHEDULER_FILE": str(tmp_path / "sched-{launch_id}.json"),
            "HPCFUTURES_TIMEOUT": "60", "HPCFUTURES_ARRAY_TIMEOUT": "60"}




def srun(command, *, env, nodes=3, tasks=6, options=(), timeout=150):
    """``srun -N nodes -n tasks COMMAND`` under a unique job name, cancelled at the end."""
    name = f"hpcf-mn-{uuid.uuid4().hex[:10]}"
    try:
        return run_job(["srun", f"-N{nodes}", f"-n{tasks}", "-J", name, "-t", "5", *options,
                        *command], env=env, timeout=timeout)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=30)


def report(text: str) -> tuple[str, str, list[tuple[str, str]]]:
    """(client host, scheduler address, [(worker, host)]) from multinode_job.py's output."""
    client = re.search(r"^CLIENT \S+ on (\S+)$", text, re.M)
    scheduler = re.search(r"^SCHEDULER (\S+)$", text, re.M)
    workers = re.search(r"^WORKERS (.*)$", text, re.M)
    assert client and scheduler and workers, text
    return client[1], scheduler[1], ast.literal_eval(workers[1])


def routable(address: str) -> bool:
    return re.fullmatch(r"tls://10\.77\.0\.1[1-3]:\d+", address) is not None


# ------------------------------------------------------------- the six across nodes
@pytest.mark.timeout(240)
def test_contract_under_srun_across_three_nodes(env):
    """srun -N 3 -n 6 puts two tasks on each node: the scheduler (rank 0) and the client
    on mn1, the four workers on mn2 and mn3."""
    job = srun(["python3", str(JOBS / "contract_job.py")], env={**env, "CONTRACT_LOG_INFO": "1"},
               timeout=210)
    assert contract_passed(job), job
    assert re.search(r"\[rank 0 scheduler\].*scheduler at tls://10\.77\.0\.11:\d+ ",
                     job.stderr), job


@pytest.mark.timeout(240)
def test_job_array_elements_on_different_nodes(tmp_path, batch):
    batch.env["EXPECT_WORKERS"] = "4"
    job = batch.submit(f"exec python3 {JOB} hosts\n", "--array=0-5", "-t", "5",
                       "-o", str(tmp_path / "out_%a.out"))
    for element in range(6):
        facts = batch.wait(f"{job}_{element}", timeout=180)
        assert (facts["JobState"], facts["ExitCode"]) == ("COMPLETED", "0:0"), batch.outputs()
    client, scheduler, workers = report((tmp_path / "out_1.out").read_text())
    assert routable(scheduler), batch.outputs()
    hosts = {host for _, host in workers}
    assert len(workers) == 4 and len(hosts | {client}) >= 2, batch.outputs()
    assert hosts - {scheduler_node(scheduler)}, "no worker ran on another node"


@pytest.mark.timeout(240)
def test_serve_on_three_nodes_and_connect_from_the_login_node(tmp_path, env, batch):
    file = tmp_path / "serve.json"
    job = batch.submit(f"srun python3 -m hpcfutures serve --scheduler-file {file}\n",
                       "-N3", "-n3", "-t", "5", "-o", str(tmp_path / "serve.out"))
    here = run_job([sys.executable, JOB, "connect", str(file)], timeout=180,
                   env={**env, "CONNECT_WAIT": "120", "EXPECT_WORKERS": "2"})
    assert here.returncode == 0 and "STOPPED" in here.stdout, (here, batch.outputs())
    client, scheduler, workers = report(here.stdout)
    assert client == os.uname().nodename and routable(scheduler), here
    assert {host for _, host in workers} == set(NODES) - {scheduler_node(scheduler)}, here
    facts = batch.wait(job, timeout=60)
    assert (facts["JobState"], facts["ExitCode"]) == ("COMPLETED", "0:0"), batch.outputs()
    assert json.loads(file.read_text())["finished"]


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_mpi_across_nodes_over_tcp(env):
    """srun --mpi=pmi2 -N 3: the address travels by MPI broadcast, over TCP between nodes."""
    import importlib.util

    require(importlib.util.find_spec("mpi4py") is not None,
            "mpi4py with the mpich wheel (python -m pip install mpi4py mpich)")
    job = srun(["python3", JOB, "hosts"], options=["--mpi=pmi2"],
               env={**env, **MPI_OVER_TCP, "EXPECT_WORKERS": "4"})
    assert job.returncode == 0, job
    _, scheduler, workers = report(job.stdout)
    assert "CLIENT mpi on mn1" in job.stdout and routable(scheduler), job
    assert {host for _, host in workers} == {"mn2", "mn3"}, job
    ucx = job.stdout + job.stderr
    assert "inter-node" in ucx and "tcp/eth0" in ucx, "UCX did not report TCP between nodes"
    assert not re.search(r"\b(sysv|posix|cma|xpmem)/", ucx), "MPI used shared memory"


@pytest.mark.timeout(240)
def test_idle_workers_on_other_nodes_are_released(tmp_path, env):
    """srun -N 3 -n 6: three of the four workers (on mn2 and mn3) leave while the client goes on."""

    go = tmp_path / "go"
    release = {**env, "HPCFUTURES_RELEASE_IDLE_AFTER": "1", "HPCFUTURES_MIN_WORKERS": "1"}
    with LiveJob(["srun", "-N3", "-n6", "-t", "5", "python3", str(JOBS / "release_job.py"),
                  "4", str(go)], release) as live:
        live.wait_for("NARROW STAGE STARTED", timeout=150)
        alive = wait_for_ranks(live.marker, lambda ranks: len(ranks & {2, 3, 4, 5}) == 1, 60)
        assert alive.get(1) == "mn1", f"the client rank ended early: {alive}"
        assert {node for rank, node in alive.items() if rank > 1} <= {"mn2", "mn3"}, alive
        go.touch()
        assert live.wait(timeout=60) == 0, live
        assert "NARROW STAGE OK" in live.text() and "AFTER RELEASE OK" in live.text(), live
        assert "WIDE STAGE OK on 4 workers" in live.text(), live


@pytest.mark.timeout(240)
def test_an_outsider_on_another_node_is_refused(tmp_path, batch):
    """A launch on mn1 and mn2; a plain Dask client started on mn3, in a job of its own."""
    file = tmp_path / "serve.json"
    batch.submit(f"srun python3 -m hpcfutures serve --scheduler-file {file}\n",
                 "-N2", "-n2", "-w", "mn1,mn2", "-t", "5", "-o", str(tmp_path / "serve.out"))
    address = wait_for_address(file, batch)
    assert routable(address), address
    outsider = f"hpcf-mn-outsider-{uuid.uuid4().hex[:10]}"
    on_mn3 = ("srun", "-w", "mn3", "-N1", "-n1", "-t", "2", "-J", outsider)
    try:
        # The port is reachable from mn3, so a refusal below is the launch's doing.
        host, port = address.removeprefix("tls://").split(":")
        reach = run_job([*on_mn3, sys.executable, "-c", "import socket, sys; socket."
                         "create_connection((sys.argv[1], int(sys.argv[2])), 10).close(); "
                         "print('REACHED', socket.gethostname())", host, port], timeout=60)
        assert "REACHED mn3" in reach.stdout, reach
        assert outsider_refused(address, "none", via=on_mn3), "no credentials got in"
        assert outsider_refused(address.replace("tls://", "tcp://"), "none", via=on_mn3), \
            "plain TCP got in"
        assert outsider_refused(address, "other", via=on_mn3), "someone else's certificate"
    finally:
        subprocess.run(["scancel", "--name", outsider], capture_output=True, timeout=30)
    stopped = run_job([sys.executable, "-m", "hpcfutures", "stop", str(file)], timeout=90)
    assert stopped.returncode == 0, (stopped, batch.outputs())


@pytest.mark.timeout(240)
def test_no_rank_answers_http_from_another_node(tmp_path, env):
    """srun -N 3 -n 4: every rank's listening port, asked from the login node, is silent
    over HTTP (the workers listen on every interface of their node: TLS only)."""
    go = tmp_path / "go"
    with LiveJob(["srun", "-N3", "-n4", "-t", "5", "python3", str(JOBS / "quiet_job.py")],
                 {**env, "HPCFUTURES_TEST_GO": str(go)}) as live:
        live.wait_for("READY", timeout=150)
        ranks = {pid: node_of(pid) for pid, command in processes_with_marker(live.marker)
                 if os.path.basename(command.split(" ", 1)[0]).startswith("python")}
        found = listening(list(ranks))
        assert sum(bool(addresses) for addresses in found.values()) == 3, found  # not the client
        addresses = [f"{NODE_ADDRESS[ranks[pid]] if ip == '0.0.0.0' else ip}:{port}"
                     for pid, pairs in found.items() for ip, port in pairs]
        assert all(len(pairs) == 1 for pairs in found.values() if pairs), found
        assert http_answers(addresses) == [], found
        go.touch()
        assert live.wait(timeout=60) == 0, live


NODE_ADDRESS = {node: f"10.77.0.1{number}" for number, node in enumerate(NODES, 1)}


def node_of(pid: int) -> str:
    """The node (mn1..mn3) a job step's process runs on, from its environment."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.decode().split("=", 1)[1] for v in environ if v.startswith(b"SLURMD_NODENAME="))


# ----------------------------------------------------------- a node that drops off
#: Seconds within which the client names a node gone from the network: Dask notices
#: in about 20 s (hpcfutures' comm timeout, see hpcfutures/_dask/tuning.py), the
#: client's watch within a second of that; the rest is room for a loaded machine.
LOSS_NOTICED = 30
#: ... and all of its workers: a connection that was still only probing when the first
#: loss was noticed is sent that worker's tasks, and its 20 s restart from that send.
LOSS_NOTICED_ALL = 2 * 20 + 10
#: The host's side of each node's link (ci/slurm-multinode-up.sh).
LINK = {node: f"hpcfmn{number}" for number, node in enumerate(NODES, 1)}


@pytest.fixture
def links():
    """Take nodes off the network (their link down, as if unplugged); every link is up
    again after the test, whatever happened, and the cluster answers again."""
    require(os.geteuid() == 0 and have_command("ip"), "root, to set a node's link down")
    cut: list[str] = []

    def down(node: str) -> None:
        cut.append(node)
        subprocess.run(["ip", "link", "set", LINK[node], "down"], check=True, timeout=10)

    def up() -> None:
        while cut:
            subprocess.run(["ip", "link", "set", LINK[cut.pop()], "up"], check=True, timeout=10)

    try:
        yield down, up
    finally:
        up()
        wait_until(lambda: takes_jobs(node_states()), 90, "the 3-node cluster answering again",
                   cap=1)


@pytest.mark.timeout(300)
def test_a_node_lost_mid_map_is_named_and_its_work_redone_elsewhere(env, links):
    """srun -N 3 -n 6: the workers are ranks 2-3 on mn2 and 4-5 on mn3; mn3's link
    goes down in the middle of a map, and comes back once the client has named it."""
    down, up = links
    with LiveJob(["srun", "-N3", "-n6", "-t", "5", "python3", str(JOBS / "checked_map_job.py"),
                  "300", "0.2"], env) as live:
        live.wait_for("STARTED", timeout=150)
        ranks = wait_for_ranks(live.marker, lambda ranks: {4, 5} <= ranks, 10)
        assert ranks[4] == ranks[5] == "mn3", ranks
        down("mn3")
        cut = time.monotonic()
        live.wait_for("(worker) left the launch before the end (on mn3;",
                      timeout=LOSS_NOTICED_ALL + 30)
        first = time.monotonic() - cut
        for rank in (4, 5):
            live.wait_for(f"rank {rank} (worker) left the launch before the end (on mn3;",
                          timeout=LOSS_NOTICED_ALL + 30)
        noticed = time.monotonic() - cut
        up()
        record_failure_time("a node drops off the network mid-map: the client names it",
                            "srun", first)
        assert first <= LOSS_NOTICED, f"{first:.1f} s\n{live}"
        assert noticed <= LOSS_NOTICED_ALL, f"{noticed:.1f} s\n{live}"
        # Every process of the launch ends (on mn3 too: they noticed the loss as well)...
        wait_until(lambda: [pid for pid, command in processes_with_marker(live.marker)
                            if not command.startswith("srun")] == [], 120,
                   "every rank of the launch to end", details=live.text)
        assert "RESULTS OK 300 from mn2" in live.text(), live
        assert "Traceback" not in own_lines(live.text()), live
        # ... and srun reports the node's loss: its ranks exit 1.  Unless mn3's ranks
        # ended while its link was down: slurmstepd's message that they exited is then
        # lost, and srun waits for it until Slurm declares the node or the job dead (seen
        # here: over 120 s after the link came back, with no step left in squeue).  That
        # wait is Slurm's; nothing of hpcfutures is left running by then (checked above).
        try:
            code = live.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return
        assert code == 1, live


# ------------------------------------------------------- choosing the address
@pytest.mark.timeout(120)
def test_loopback_across_nodes_fails_at_once_on_every_rank(env):
    job = srun(["python3", JOB, "hosts"], tasks=3, env={**env, "HPCFUTURES_HOST": "127.0.0.1"},
               timeout=90)
    assert job.returncode != 0 and job.seconds < scaled(30), job
    said = "ConfigurationError: HPCFUTURES_HOST=127.0.0.1 binds the scheduler and workers"
    assert job.stderr.count(said) == 3, job
    assert "HPCFUTURES_INTERFACE (this host has: eth0 10.77.0.1" in job.stderr, job


@pytest.fixture
def no_default_route():
    """The nodes lose their default route for the test (an isolated compute network)."""
    require(os.geteuid() == 0 and have_command("ip"), "root, to change the nodes' routes")
    had = [node for node in NODES if subprocess.run(
        ["ip", "-n", node, "route", "show", "default"], capture_output=True, text=True,
        timeout=10).stdout.strip()]
    for node in had:
        subprocess.run(["ip", "-n", node, "route", "del", "default"], check=True, timeout=10)
    yield
    for node in had:
        subprocess.run(["ip", "-n", node, "route", "replace", "default", "via", "10.77.0.1",
                        "dev", "eth0"], check=True, timeout=10)


def without_node_names(tmp_path) -> list[str]:
    """A command prefix: run in a mount namespace whose /etc/hosts lacks mn1..mn3."""
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(line for line in Path("/etc/hosts").read_text().splitlines(True)
                             if "hpcfutures-slurm-mn" not in line))
    return ["unshare", "--mount", "sh", "-c",
            f'mount --bind {hosts} /etc/hosts && exec "$0" "$@"']


@pytest.mark.timeout(240)
@pytest.mark.parametrize("names", ["resolvable", "unresolvable"])
def test_nodes_without_a_default_route_still_use_routable_addresses(
        tmp_path, env, no_default_route, names):
    prefix = without_node_names(tmp_path) if names == "unresolvable" else []
    if names == "unresolvable":
        info = srun([*prefix, "sh", "-c", f'{sys.executable} -m hpcfutures info --json '
                     f'> {tmp_path}/info-"$SLURM_PROCID".json'], tasks=3, env=env, timeout=90)
        assert info.returncode == 0, info
        for rank, node in enumerate(NODES):
            report_ = json.loads((tmp_path / f"info-{rank}.json").read_text())
            assert report_["bind"] == f"10.77.0.1{rank + 1}", report_
            assert "no default route" in report_["bind_why"] and "eth0" in report_["bind_why"]
            assert f"'{node}' does not resolve" in report_["bind_why"], report_
    job = srun([*prefix, "python3", JOB, "hosts"], tasks=4, env={**env, "EXPECT_WORKERS": "2"})
    assert job.returncode == 0, job
    client, scheduler, workers = report(job.stdout)
    assert client == "mn1" and scheduler.startswith("tls://10.77.0.11:"), job
    assert {host for _, host in workers} == {"mn2", "mn3"}, job
    assert DASK_FALLBACK_WARNING not in job.stderr, job


# ------------------------------------------------ heterogeneous jobs across nodes
# Here, not in test_resources (what they check), because they take this cluster's nodes:
# a parallel run runs them one after another with the tests above, never beside them.
@pytest.mark.timeout(200)
@pytest.mark.parametrize("gpus", ["declared", "slurm"])
def test_one_launch_over_the_components_of_a_heterogeneous_srun(env, gpus):
    """srun A : B on two nodes: the scheduler, the client and a 1-thread worker in the
    first component; two 2-thread workers with a GPU each in the second: declared
    (HPCFUTURES_GPUS), or given by Slurm (--gpus-per-task=1 on the cluster's GPU node,
    its GRES), as on a cluster with CPU and GPU nodes.

    Slurm 22.05 gives every task of a heterogeneous step the last component's
    SLURM_CPUS_PER_TASK (ci/SLURM_FACTS.md): the first component says its threads."""
    script = [sys.executable, str(JOBS / "hetjob_job.py"), "3", "2", "2"]
    second = (["env", "HPCFUTURES_GPUS=0,1"] if gpus == "declared"
              else ["--gpus-per-task=1", "env"])
    name = f"hpcf-het-{os.getpid()}"
    try:
        job = run_job(["srun", "-J", name, "-t", "4", "-O", "-N1", "-n3", "-c1", "env",
                       "HPCFUTURES_THREADS_PER_WORKER=1", *script, ":",
                       "-O", "-N1", "-n2", "-c2", *second, *script],
                      env=env, timeout=180)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=30)
    assert job.returncode == 0 and "HETJOB OK" in job.stdout and "FAILED" not in job.stdout, job
    if gpus == "slurm":
        assert "CHECK no two workers share a GPU: ok" in job.stdout, job


@pytest.mark.timeout(200)
@pytest.mark.parametrize("gpus", [0, 2])
def test_allocate_submits_a_heterogeneous_job_and_maps_over_both_components(env, tmp_path, gpus):
    """With gpus=2 the second component asks Slurm for the GPU node's two GPUs
    (--gpus-per-node): calls with gpus=1 run there only, each with one of its own."""
    job = run_job([sys.executable, str(JOBS / "hetalloc_job.py"), str(tmp_path), str(gpus)],
                  env=env, timeout=180)
    assert job.returncode == 0 and "HETALLOC OK" in job.stdout, job


# ----------------------------------------------------------------------- helpers
def scheduler_node(address: str) -> str:
    return f"mn{address.removeprefix('tls://10.77.0.1').split(':')[0]}"


def wait_for_ranks(marker: str, done, timeout: float) -> dict[int, str]:
    """Poll the Slurm tasks still alive until ``done(ranks)``; return {rank: node} then."""
    deadline = time.monotonic() + timeout
    while True:
        ranks = {}
        for pid, _ in processes_with_marker(marker):
            try:
                variables = dict(v.split(b"=", 1) for v in
                                 Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if v)
                ranks[int(variables[b"SLURM_PROCID"])] = variables[b"SLURMD_NODENAME"].decode()
            except (OSError, KeyError, ValueError):
                continue  # gone meanwhile, or srun itself
        if done(set(ranks)):
            return ranks
        if time.monotonic() > deadline:
            pytest.fail(f"ranks still alive after {timeout} s: {ranks}")
        time.sleep(0.2)


def wait_for_address(file: Path, batch, timeout: float = 120) -> str:
    """The address a serving launch published in ``file``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    pytest.fail(f"no scheduler file at {file} after {timeout} s\n{batch.outputs()}")

