"""From a laptop outside the cluster, through ssh and a jump host, for real (issue 27).

The lab (ci/ssh-lab-up.sh): the laptop is another network namespace and another
Unix user, whose only route leads to a jump host's sshd; through it, the login
node's sshd (this machine), which submits to the 3-node Slurm cluster as the
cluster's account.  Each test runs a short script on the laptop
(``$LAB/laptop python script.py``) with a copy of this checkout's code, which
the jobs on the cluster import too (``SSH(setup="export PYTHONPATH=...")``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from helpers import ROOT, require
from pace import scaled

pytestmark = pytest.mark.ssh_lab

LAB = Path("/opt/hpcfutures-ssh-lab")
CLUSTER_USER, LAPTOP_USER = "hpcfcluster", "hpcflaptop"
MN_ENV = {**os.environ, "SLURM_CONF": "/etc/hpcfutures-slurm-mn/slurm.conf"}


def _lab_is_up() -> bool:
    pid = Path("/run/hpcfutures-ssh-lab/login.pid")
    try:
        return (LAB / "laptop").exists() and Path(f"/proc/{pid.read_text().strip()}").exists()
    except OSError:
        return False


@pytest.fixture(scope="module")
def code():
    """This checkout's package, where both the laptop and the cluster's account read it."""
    require(_lab_is_up(), "the SSH lab (ci/ssh-lab-up.sh)")
    folder = LAB / "src" / uuid.uuid4().hex[:12]
    shutil.copytree(ROOT / "hpcfutures", folder / "hpcfutures",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def nothing_left():
    """After each test: no job of the cluster's account, no process of the laptop's."""
    yield
    leftovers = _queue()
    subprocess.run(["scancel", "-u", CLUSTER_USER], env=MN_ENV, timeout=20)
    deadline = time.monotonic() + 5  # a process that has just exited may not be reaped yet
    while True:
        laptop = "\n".join(  # zombies: this machine's init may never reap an orphan
            line for line in subprocess.run(
                ["ps", "-u", LAPTOP_USER, "-o", "stat=,pid=,args="], capture_output=True,
                text=True, timeout=10).stdout.splitlines() if not line.startswith("Z"))
        if not laptop or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if laptop:  # ended here, so that one test's leftovers fail that test alone
        subprocess.run(["pkill", "-KILL", "-u", LAPTOP_USER], timeout=10)
    assert not leftovers, f"jobs left in the queue: {leftovers}"
    assert not laptop, f"processes left on the laptop: {laptop}"


def _queue() -> list[str]:
    done = subprocess.run(["squeue", "-h", "-u", CLUSTER_USER, "-o", "%i %T"], env=MN_ENV,
                          capture_output=True, text=True, timeout=20)
    return done.stdout.split("\n") if done.stdout.strip() else []


def _until_queue_empty(seconds: float) -> bool:
    deadline = time.monotonic() + scaled(seconds)
    while _queue():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _script(code: Path, body: str) -> Path:
    path = code / f"t-{uuid.uuid4().hex[:8]}.py"
    path.write_text(textwrap.dedent(f"""\
        import json, os, signal, socket, sys, time
        import hpcfutures
        SSH = hpcfutures.SSH("cluster", python="{LAB}/venv/bin/python",
                             setup="export PYTHONPATH={code}")
        """) + textwrap.dedent(body))
    path.chmod(0o644)
    return path


def _laptop(code: Path, body: str, timeout: float = 90) -> subprocess.Popen:
    return subprocess.Popen([str(LAB / "laptop"), "python", str(_script(code, body))],
                            env={**os.environ, "LAB_PYTHONPATH": str(code)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")


def _on_laptop(code: Path, body: str, timeout: float = 90) -> str:
    process = _laptop(code, body)
    timeout = scaled(timeout)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"the laptop's script did not end within {timeout} s:\n{out}")
    assert process.returncode == 0, out
    return out


def test_allocate_through_the_jump_host_maps_on_two_nodes_brings_50_MiB_intact_and_leaves_nothing(
        code):
    out = _on_laptop(code, """
        import hashlib
        started = time.monotonic()
        with hpcfutures.allocate(nodes=2, tasks_per_node=2, partition="mn", ssh=SSH,
                                 idle_timeout=60) as ex:
            hosts = sorted(set(ex.map(lambda _: socket.gethostname(), range(40))))
            direct = ex._outside._client_side.client.direct_to_workers
            def blob():
                import random
                data = random.Random(7).randbytes(50 * 2**20)
                return data, __import__("hashlib").sha256(data).hexdigest()
            t = time.monotonic()
            data, digest = ex.submit(blob).result()
            fetch = time.monotonic() - t
        ok = len(data) == 50 * 2**20 and hashlib.sha256(data).hexdigest() == digest
        print("RESULT", json.dumps({"hosts": hosts, "intact": ok, "fetch": fetch, "direct": direct,
                                    "took": time.monotonic() - started}))
        """)
    result = eval(out.split("RESULT ", 1)[1].splitlines()[0].replace("true", "True")
                  .replace("false", "False"))
    assert result["hosts"] == ["mn1", "mn2"], out
    assert result["intact"], out
    assert result["direct"] is False, out  # results come through the scheduler
    # Through the scheduler, not straight from the (unreachable) worker: a direct
    # gather would first wait ~30 s for a connection that cannot be made.
    assert result["took"] < scaled(30), out
    print(f"50 MiB result through ssh + the scheduler: {result['fetch']:.2f} s")
    assert _until_queue_empty(5), _queue()


def test_connect_and_stop_a_serve_job_sbatched_on_the_cluster(code):
    token = uuid.uuid4().hex[:8]
    schedfile = f"/home/{CLUSTER_USER}/hpcf-lab-{token}.json"
    submitted = subprocess.run(
        ["runuser", "-u", CLUSTER_USER, "--", "sbatch", "--parsable", "-p", "mn", "-N", "2",
         "--ntasks-per-node", "2", "-o", f"/home/{CLUSTER_USER}/hpcf-lab-{token}.out",
         f"--export=ALL,PYTHONPATH={code}",
         "--wrap", f"srun {LAB}/venv/bin/python -m hpcfutures serve --scheduler-file "
                   f"{schedfile} --idle-timeout 60"],
        env=MN_ENV, capture_output=True, text=True, timeout=30, cwd="/")
    assert submitted.returncode == 0, submitted.stderr
    out = _on_laptop(code, f"""
        where = "cluster:~/hpcf-lab-{token}.json"
        with hpcfutures.connect(where, wait=60) as ex:
            print("SUM", sum(ex.map(abs, range(-50, 50))))
        # The scp-style path with ssh= naming the same cluster is the same file.
        with hpcfutures.connect(where, ssh=hpcfutures.SSH("cluster"), wait=60) as ex:
            print("AGAIN", ex.submit(abs, -3).result())
        print("AFTER", os.popen("true").close())  # left: the job keeps serving
        """)
    assert "SUM 2500" in out and "AGAIN 3" in out, out
    assert _queue(), "leaving a connected executor stopped the job"
    out = _on_laptop(code, f"""
        from hpcfutures._cli import main
        sys.exit(main(["stop", "cluster:~/hpcf-lab-{token}.json"]))
        """)
    assert "has stopped" in out, out
    assert _until_queue_empty(30), _queue()


def test_an_unknown_host_key_submits_nothing(code):
    jobs = Path(f"/home/{CLUSTER_USER}/.hpcfutures/jobs")
    before = set(os.listdir(jobs)) if jobs.exists() else set()
    out = _on_laptop(code, """
        try:
            hpcfutures.allocate(partition="mn", ssh="cluster-wrongkey")
        except hpcfutures.SSHError as err:
            print("ERROR", err)
        """)
    assert "ERROR" in out and "Host key verification failed" in out, out
    assert "Nothing was done on the cluster" in out, out
    assert (set(os.listdir(jobs)) if jobs.exists() else set()) == before
    assert not _queue()


def test_forwarding_prohibited_by_the_site_is_a_clear_error_and_cancels_the_job(code):
    out = _on_laptop(code, """
        nofwd = hpcfutures.SSH("cluster-nofwd", python=SSH.python, setup=SSH.setup)
        try:
            hpcfutures.allocate(partition="mn", ssh=nofwd, timeout=60)
        except hpcfutures.SSHError as err:
            print("ERROR", err)
        """)
    assert "ERROR" in out and "refuses port forwarding" in out, out
    assert "AllowTcpForwarding" in out, out
    assert _until_queue_empty(10), _queue()


def test_ctrl_c_while_queued_cancels_the_job(code):
    process = _laptop(code, """
        print("START", flush=True)
        hpcfutures.allocate(partition="mn", ssh=SSH, directives=["#SBATCH --hold"])
        """)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + scaled(30)
        while not _queue():
            assert time.monotonic() < deadline and process.poll() is None, \
                process.communicate()[0]
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=scaled(30))
    finally:
        if process.poll() is None:
            process.kill()
    assert "KeyboardInterrupt" in out, out
    assert _until_queue_empty(10), _queue()


def test_a_lost_ssh_connection_mid_map_is_a_clear_error_and_the_job_ends_by_itself(code):
    out = _on_laptop(code, """
        started = time.monotonic()
        with hpcfutures.allocate(nodes=2, partition="mn", ssh=SSH, idle_timeout=10) as ex:
            pid = ex._cluster.connection.master_pid()
            results = ex.map(time.sleep, [0.5] * 200)
            next(results)
            os.kill(pid, signal.SIGKILL)  # the laptop slept, the Wi-Fi changed ...
            t = time.monotonic()
            try:
                list(results)
            except hpcfutures.AllocationLostError as err:
                print("LOST after %.1f s:" % (time.monotonic() - t), err, repr(err.__cause__))
        """, timeout=120)
    assert "LOST after" in out, out
    assert "SSH connection to cluster" in out and "idle_timeout=10" in out, out
    assert "hpcfutures.connect('cluster:" in out, out
    assert _until_queue_empty(60), f"the job did not end by itself: {_queue()}"


def test_ssh_check_reports_the_cluster_and_reuses_the_users_own_master(code):
    """cluster-own has ControlMaster/ControlPath in the laptop's config, and a master
    runs: the check logs in no second time and leaves that master running."""
    out = _on_laptop(code, """
        import subprocess
        from hpcfutures._cli import main
        subprocess.run(["ssh", "-fN", "cluster-own"], check=True, timeout=30)
        status = main(["ssh-check", "cluster-own", "--python", SSH.python, "--setup",
                       SSH.setup])
        print("STATUS", status)
        alive = subprocess.run(["ssh", "-O", "check", "cluster-own"], capture_output=True,
                               text=True, timeout=30)
        print("STILL", alive.returncode, alive.stderr.strip())
        subprocess.run(["ssh", "-O", "exit", "cluster-own"], timeout=30)
        """)
    assert "STATUS 0" in out, out
    assert "master: yours, reused" in out, out
    assert "batch_system: Slurm" in out and "port_forwarding: allowed" in out, out
    assert "STILL 0 Master running" in out, out


def test_no_batch_system_on_the_remote_path_suggests_setup_and_submits_nothing(code):
    out = _on_laptop(code, """
        bare = hpcfutures.SSH("cluster", python=SSH.python, setup="PATH=/nowhere; export PATH")
        try:
            hpcfutures.allocate(partition="mn", ssh=bare)
        except hpcfutures.AllocationError as err:
            print("ERROR", err)
        """)
    assert "ERROR no batch system found on cluster" in out, out
    assert "setup='module load slurm'" in out, out
    assert not _queue()


def test_a_second_factor_is_asked_once_per_session_even_without_a_terminal(code):
    """The :2224 sshd wants the key and then a password; the laptop's script has no
    terminal (a notebook's case), so the prompt comes to the process (getpass)."""
    log = Path("/var/log/hpcfutures-ssh-lab/twofactor.log")
    before = log.read_text().count("Accepted password for")
    out = _on_laptop(code, """
        import getpass
        asked = []
        def answer(prompt):
            asked.append(prompt)
            return "hpcf-lab-second-factor"
        getpass.getpass = answer
        two = hpcfutures.SSH("cluster-2fa", python=SSH.python, setup=SSH.setup)
        with hpcfutures.allocate(partition="mn", ssh=two, idle_timeout=60) as ex:
            first = sum(ex.map(abs, range(10)))
            second = sum(ex.map(abs, range(10)))
        print("ASKED", len(asked), asked, first + second)
        """)
    assert "ASKED 1 " in out and "password" in out.lower(), out
    assert log.read_text().count("Accepted password for") - before == 1


def test_a_job_that_dies_before_serving_says_so_with_its_output_from_the_cluster(code):
    out = _on_laptop(code, """
        broken = hpcfutures.SSH("cluster", python="/nowhere/bin/python", setup=SSH.setup)
        try:
            hpcfutures.allocate(partition="mn", ssh=broken)
        except hpcfutures.NotServingError as err:
            print("ERROR", err)
        """)
    assert "ERROR Slurm job" in out and "ended before it served" in out, out
    assert "/nowhere/bin/python" in out, out  # the job's own output, read on the cluster
    assert not _queue()


def test_scale_adds_a_worker_job_on_the_cluster(code):
    out = _on_laptop(code, """
        with hpcfutures.allocate(nodes=1, tasks_per_node=2, partition="mn", ssh=SSH,
                                 idle_timeout=60) as ex:
            ex.scale(1)
            deadline = time.monotonic() + 60
            while ex.workers() < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            print("WORKERS", ex.workers(), len(ex.worker_jobs), str(ex.worker_jobs[0]))
            print("SUM", sum(ex.map(abs, range(-20, 20))))
        """)
    assert "WORKERS 2 1 Slurm job" in out and "on cluster" in out, out
    assert "SUM 400" in out, out
    assert _until_queue_empty(5), _queue()


def test_ssh_check_names_a_version_mismatch_ahead_of_time(code):
    out = _on_laptop(code, """
        from hpcfutures._cli import main
        os.environ["HPCFUTURES_FAKE_VERSIONS"] = "python=3.9"  # this side only (test seam)
        print("STATUS", main(["ssh-check", "cluster", "--python", SSH.python, "--setup",
                              SSH.setup]))
        """)
    assert "STATUS 1" in out, out
    assert "error: versions differ:" in out and "this machine runs Python 3.9" in out, out


def test_allocate_reuses_the_users_master_and_leaves_it_running_without_our_forward(code):
    out = _on_laptop(code, """
        import subprocess
        def listening():
            return subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        subprocess.run(["ssh", "-fN", "cluster-own"], check=True, timeout=30,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        own = hpcfutures.SSH("cluster-own", python=SSH.python, setup=SSH.setup)
        with hpcfutures.allocate(partition="mn", ssh=own, idle_timeout=60) as ex:
            print("OWNED", ex._cluster.connection.owned, sum(ex.map(abs, range(10))))
            print("DURING", "127.0.0.1:" in listening())
        print("AFTER", "127.0.0.1:" in listening())
        alive = subprocess.run(["ssh", "-O", "check", "cluster-own"], capture_output=True,
                               text=True, timeout=30)
        print("STILL", alive.returncode)
        subprocess.run(["ssh", "-O", "exit", "cluster-own"], capture_output=True, timeout=30)
        """)
    assert "OWNED False 45" in out and "DURING True" in out, out
    assert "AFTER False" in out and "STILL 0" in out, out
    assert _until_queue_empty(5), _queue()


def test_a_function_from_modules_only_the_laptop_has_runs_on_the_cluster(code):
    """The laptop's own modules (in its private /tmp, which no node of the cluster has),
    one importing the other, travel by value with the function (issue 27)."""
    out = _on_laptop(code, """
        import tempfile
        own = tempfile.mkdtemp()  # the laptop's own /tmp: the cluster has no such folder
        with open(os.path.join(own, "lab_helpers.py"), "w") as f:
            f.write("def twice(x):\\n    return 2 * x\\n")
        with open(os.path.join(own, "lab_model.py"), "w") as f:
            f.write("from lab_helpers import twice\\n\\ndef model(x):\\n    return twice(x) + 1\\n")
        sys.path.insert(0, own)
        import lab_model
        with hpcfutures.allocate(nodes=1, tasks_per_node=2, partition="mn", ssh=SSH,
                                 idle_timeout=60) as ex:
            print("RESULTS", list(ex.map(lab_model.model, range(5))))
            print("SEEN THERE", ex.submit(os.path.isdir, own).result())
        """)
    assert "RESULTS [1, 3, 5, 7, 9]" in out, out
    assert "SEEN THERE False" in out, out  # the folder exists on the laptop only
    assert _until_queue_empty(5), _queue()


def test_allocate_refuses_other_versions_before_the_first_call_and_leaves_nothing(code):
    """A laptop whose Python differs from the cluster's (faked on the laptop's side,
    the documented test seam) gets one error naming both, and the job is gone."""
    out = _on_laptop(code, """
        os.environ["HPCFUTURES_FAKE_VERSIONS"] = "python=3.9"  # this side only (test seam)
        try:
            with hpcfutures.allocate(nodes=1, tasks_per_node=2, partition="mn", ssh=SSH,
                                     idle_timeout=60) as ex:
                print("CONNECTED")
        except hpcfutures.VersionMismatchError as err:
            print("REFUSED", err)
        """)
    assert "REFUSED" in out and "CONNECTED" not in out, out
    assert "3.9" in out, out
    assert _until_queue_empty(30), _queue()
