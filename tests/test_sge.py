"""The Grid Engine plug-in against a real Grid Engine (ci/sge-up.sh): job arrays from qsub.

Jobs are submitted as the unprivileged user ci/sge-up.sh creates (Grid Engine
strips TMPDIR and LD_* from root's jobs), run the Python of ci/sge-python.sh
(that user cannot read a Python under /root) and a copy of the working tree
in a world-readable temporary directory. Every wait polls ``qstat``/``qacct``
with a deadline; every job's processes carry a marker that must be gone at
the end, and the job must have left ``qstat``.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    JOBS,
    MARKER_VAR,
    ROOT,
    TESTS,
    assert_no_leftovers,
    have_command,
    record_failure_time,
    require,
    wait_until,
)
from pace import scaled

JOB_USER = os.environ.get("SGE_JOB_USER", "hpcuser")
#: Seconds a job array may take from qsub to leaving qstat (queueing included).
JOB_DEADLINE = 90.0
#: Seconds qacct may lag behind qstat.
ACCOUNTING_DEADLINE = 30.0


def sge_is_up() -> bool:
    """Grid Engine answers, its job user exists, and we may submit as that user (root)."""
    if not (have_command("qsub") and have_command("qacct") and have_command("runuser")):
        return False
    try:
        pwd.getpwnam(JOB_USER)
        result = subprocess.run(["qstat", "-f"], capture_output=True, text=True, timeout=20)
    except (KeyError, OSError, subprocess.SubprocessError):
        return False
    return os.geteuid() == 0 and result.returncode == 0 and "all.q@" in result.stdout


def _sge(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """A Grid Engine command as the job user, with a deadline."""
    result = subprocess.run(["runuser", "-u", JOB_USER, "--", *args], capture_output=True,
                            text=True, timeout=30)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


@pytest.fixture(scope="module")
def cluster():
    """(python for the jobs, a world-readable copy of the tree owned by the job user)."""
    require(sge_is_up(), "a running Grid Engine (bash ci/sge-up.sh, as root)")
    built = subprocess.run(["bash", str(ROOT / "ci" / "sge-python.sh")], capture_output=True,
                           text=True, timeout=900,
                           env={**os.environ, "SGE_PYTHON_REFERENCE": sys.executable})
    assert built.returncode == 0, built.stderr
    python = built.stdout.strip().splitlines()[-1]
    tree = Path(f"/tmp/hpcfutures-sge-{uuid.uuid4().hex[:8]}")
    shutil.copytree(ROOT / "hpcfutures", tree / "hpcfutures",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tests").mkdir()
    for module in ("contract.py", "pace.py", "waiting.py"):  # what the job scripts import
        shutil.copy(TESTS / module, tree / "tests" / module)
    shutil.copytree(JOBS, tree / "tests" / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    _chown_tree(tree)
    yield python, tree
    shutil.rmtree(tree, ignore_errors=True)


def _chown_tree(path: Path) -> None:
    user = pwd.getpwnam(JOB_USER)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs),
                     *(os.path.join(root, f) for f in files)]:
            os.chown(name, user.pw_uid, user.pw_gid)


class Array:
    """One submitted job: its id, output directory and marker."""

    def __init__(self, cluster, name: str, extra_env: dict | None = None):
        self.python, self.tree = cluster
        self.out = Path(f"/tmp/hpcfutures-sge-{name}-{uuid.uuid4().hex[:8]}")
        self.out.mkdir()
        _chown_tree(self.out)
        self.marker = uuid.uuid4().hex
        self.schedfile = self.out / "scheduler.json"
        self.env = {
            "PYTHONPATH": str(self.tree), MARKER_VAR: self.marker,
            "HPCFUTURES_HOST": "127.0.0.1",            # elements on one host: loopback only
            "HPCFUTURES_SCHEDULER_FILE": str(self.schedfile),
            "HPCFUTURES_TIMEOUT": "60", "HPCFUTURES_ARRAY_TIMEOUT": "60",
            "JOB_PYTHON": self.python, **(extra_env or {}),
        }
        self.job = ""

    def submit(self, *qsub_args: str) -> str:
        variables = ",".join(f"{k}={v}" for k, v in self.env.items())
        result = _sge("qsub", "-terse", "-cwd", "-j", "y", "-o", f"{self.out}/out.$TASK_ID",
                      "-v", variables, *qsub_args)
        self.job = result.stdout.strip().split(".")[0]
        assert self.job.isdigit(), result.stdout
        return self.job

    def wait(self, deadline: float = JOB_DEADLINE) -> None:
        """Poll qstat until the job has left it."""
        try:
            wait_until(self.in_qstat, deadline, f"job {self.job} to leave qstat",
                       done=lambda listed: not listed, details=self.report)
        except AssertionError:
            _sge("qdel", "-f", self.job, check=False)
            raise

    def in_qstat(self) -> bool:
        listing = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True,
                                 timeout=30).stdout
        return any(line.split()[:1] == [self.job] for line in listing.splitlines())

    def accounting(self, tasks: set[int]) -> dict[int, dict[str, str]]:
        """qacct's record of each task in ``tasks``, polled until all are there."""
        return wait_until(lambda: _qacct(self.job), ACCOUNTING_DEADLINE,
                          f"qacct records of tasks {sorted(tasks)} of job {self.job}",
                          done=lambda records: tasks <= set(records), details=self.report)

    def output(self, task: int) -> str:
        path = self.out / f"out.{task}"
        return path.read_text() if path.exists() else ""

    def report(self) -> str:
        return "\n".join(f"--- task output {p.name}\n{p.read_text()}"
                         for p in sorted(self.out.glob("out.*")))

    def finish(self) -> None:
        assert not self.in_qstat(), f"job {self.job} is still in qstat"
        assert_no_leftovers(self.marker)


def _qacct(job: str) -> dict[int, dict[str, str]]:
    result = subprocess.run(["qacct", "-j", job], capture_output=True, text=True, timeout=30)
    records: dict[int, dict[str, str]] = {}
    for block in re.split(r"^=+$", result.stdout, flags=re.MULTILINE):
        fields = dict(line.split(None, 1) for line in block.strip().splitlines() if " " in line)
        fields = {k: v.strip() for k, v in fields.items()}
        task = fields.get("taskid", "")
        if task.isdigit() or task == "undefined":  # "undefined": not an array job
            records[int(task) if task.isdigit() else 0] = fields
    return records


@pytest.fixture
def array(cluster):
    made = []

    def make(name: str, **env) -> Array:
        made.append(Array(cluster, name, env))
        return made[-1]

    yield make
    for job in made:
        if job.job and job.in_qstat():
            _sge("qdel", "-f", job.job, check=False)
        shutil.rmtree(job.out, ignore_errors=True)


# ------------------------------------------------------------------------------------- tests
@pytest.mark.timeout(150)
def test_job_array_runs_the_contract_suite(array):
    job = array("contract")
    job.submit("-t", "1-4", "-b", "y", "-shell", "no", job.python,
               str(job.tree / "tests" / "jobs" / "contract_job.py"))
    job.wait()
    records = job.accounting({1, 2, 3, 4})
    client = job.output(2)  # task 2 is rank 1: the client prints the contract's results
    assert "CONTRACT RESULT" in client and "FAIL " not in client, job.report()
    statuses = {t: records[t]["exit_status"] for t in (1, 2, 3, 4)}
    assert statuses == dict.fromkeys((1, 2, 3, 4), "0"), job.report()
    job.finish()


LATE_WRAPPER = """#!/bin/bash
# Task 4 plays an element that starts after the client finished: it waits (60 s at most) for
# the scheduler's tombstone before starting Python.
if [ "$SGE_TASK_ID" = 4 ]; then
  for _ in $(seq 600); do
    grep -q '"finished": true' "$HPCFUTURES_SCHEDULER_FILE" 2>/dev/null && break
    sleep 0.1
  done
  echo "LATE START"
fi
exec "$JOB_PYTHON" "$CONTRACT_JOB"
"""


@pytest.mark.timeout(150)
def test_late_element_exits_0_and_pending_elements_are_deleted(array):
    job = array("late", CONTRACT_CHECKS="map_keeps_order")
    job.env["CONTRACT_JOB"] = str(job.tree / "tests" / "jobs" / "contract_job.py")
    wrapper = job.out / "late.sh"
    wrapper.write_text(LATE_WRAPPER)
    wrapper.chmod(0o755)
    _chown_tree(job.out)
    # Every task held, then 1-4 released: task 5 stays pending until the client deletes it.
    job.submit("-h", "-t", "1-5", str(wrapper))
    _sge("qrls", job.job, "-t", "1-4")
    job.wait()
    records = job.accounting({1, 2, 3, 4})
    assert "CONTRACT RESULT passed=5 failed=0" in job.output(2), job.report()
    assert "LATE START" in job.output(4), job.report()
    statuses = {t: records[t]["exit_status"] for t in (1, 2, 3, 4)}
    assert statuses == dict.fromkeys((1, 2, 3, 4), "0"), job.report()
    assert 5 not in records and not job.output(5), "the pending task 5 ran instead of being deleted"
    job.finish()


@pytest.mark.timeout(180)
def test_tasks_whose_scheduler_task_was_deleted_end_within_a_minute(array):
    """Task 1 (the scheduler) is deleted while it waits: the other tasks, waiting for
    array_timeout (an hour here), ask qstat, learn why, and end."""
    job = array("gone", HPCFUTURES_ARRAY_TIMEOUT="3600")
    job.submit("-h", "-t", "1-4", "-b", "y", "-shell", "no", job.python,
               str(job.tree / "tests" / "jobs" / "short_job.py"))
    _sge("qdel", job.job, "-t", "1")
    _sge("qrls", job.job, "-t", "2-4")
    released = time.monotonic()
    job.wait()
    took = time.monotonic() - released
    records = job.accounting({2, 3, 4})
    record_failure_time("array: scheduler element deleted while pending, others end",
                        "qsub -t", took)
    assert took < scaled(60), f"{took:.0f} s\n{job.report()}"
    for task in (2, 3, 4):
        assert records[task]["exit_status"] != "0", job.report()
        assert (f"the scheduler's element of job array {job.job} (index 1, rank 0) is no "
                "longer pending or running in Grid Engine") in job.output(task), job.report()
    assert 1 not in records, "the deleted task ran"
    job.finish()


@pytest.mark.timeout(120)
def test_the_client_tasks_failure_is_recorded_by_qacct(array):
    job = array("fail")
    job.submit("-t", "1-3", "-b", "y", "-shell", "no", job.python,
               str(job.tree / "tests" / "jobs" / "fail_job.py"))
    job.wait()
    records = job.accounting({1, 2, 3})
    assert "the client failed on purpose" in job.output(2), job.report()
    statuses = {t: records[t]["exit_status"] for t in (1, 2, 3)}
    # The client's task failed; the scheduler's and the worker's ended well.
    assert statuses == {1: "0", 2: "1", 3: "0"}, (statuses, job.report())
    job.finish()


@pytest.mark.timeout(120)
def test_a_caught_client_exception_ends_every_task_with_0(array):
    job = array("caught")
    job.submit("-t", "1-3", "-b", "y", "-shell", "no", job.python,
               str(job.tree / "tests" / "jobs" / "caught_job.py"), "exception")
    job.wait()
    records = job.accounting({1, 2, 3})
    assert "AFTER THE BLOCK" in job.output(2), job.report()
    statuses = {t: records[t]["exit_status"] for t in (1, 2, 3)}
    assert statuses == {1: "0", 2: "0", 3: "0"}, (statuses, job.report())
    job.finish()


@pytest.mark.timeout(90)
def test_job_script_runs_standalone_on_its_slots(array):
    """Outside an array (SGE_TASK_ID=undefined) the script is one process: NSLOTS local workers."""
    job = array("info")
    job.submit("-pe", "smp", "2", "-b", "y", "-shell", "no", job.python, "-m", "hpcfutures",
               "info", "--json")
    job.wait()
    report = json.loads(job.output(0))  # outside an array, -o out.$TASK_ID names out.0
    assert report["launcher"] == "sge", report
    assert report["role"] == "standalone" and report["local_workers"] == 2, report
    assert any("job script" in line for line in report["why"]), report
    job.finish()


@pytest.mark.timeout(120)
def test_tombstone_of_an_earlier_array_with_the_same_job_id_is_ignored(array):
    """Job numbers restart at 1 on a fresh cluster: an old end marker must not end this array."""
    job = array("stale", CONTRACT_CHECKS="map_keeps_order", CONTRACT_LOG_INFO="1")
    job.submit("-h", "-t", "1-3", "-b", "y", "-shell", "no", job.python,
               str(job.tree / "tests" / "jobs" / "contract_job.py"))
    stale = {"hpcfutures": 1, "address": "", "launch_id": f"sge-{job.job}-array",
             "nonce": "earlier-array", "host": "elsewhere", "pid": 1,
             "created": time.time() - 3600, "security": {}, "finished": True}
    job.schedfile.write_text(json.dumps(stale))
    job.schedfile.chmod(0o600)
    _chown_tree(job.out)
    # The client and the worker start first and find only the old marker (they log that
    # they ignore it); only then does the scheduler (task 1) start.
    _sge("qrls", job.job, "-t", "2-3")
    for task in (2, 3):
        wait_until(lambda task=task: "earlier array" in job.output(task), 60,
                   f"task {task} ignoring the earlier array's end marker", details=job.report)
    _sge("qrls", job.job, "-t", "1")
    job.wait()
    records = job.accounting({1, 2, 3})
    assert "CONTRACT RESULT passed=5 failed=0" in job.output(2), job.report()
    assert {t: records[t]["exit_status"] for t in (1, 2, 3)} == dict.fromkeys((1, 2, 3), "0"), \
        job.report()
    job.finish()


@pytest.mark.timeout(120)
def test_mpiexec_in_a_parallel_environment_job_is_the_mpi_plugins(array):
    """-pe mpi 3 with mpiexec inside: JOB_ID is set in every rank, but MPI's numbering wins."""
    job = array("pe")
    mpiexec = str(Path(job.python).parent / "mpiexec")  # the mpich wheel's (ci/sge-python.sh)
    job.submit("-pe", "mpi", "3", "-b", "y", "-shell", "no", mpiexec, "-n", "3", job.python,
               "-c", "import hpcfutures.launchers as l, os; "
                     "print('LAUNCHER', l.detect_launcher(os.environ)[0].name, flush=True)")
    job.wait()
    assert job.output(0).count("LAUNCHER mpi") == 3, job.report()  # not "sge"
    job.finish()
    # one check (qsub -v splits its list at commas): tasks run on a worker rank, not the client
    whole = array("pe-contract", CONTRACT_CHECKS="tasks_run_outside_the_client")
    whole.submit("-pe", "mpi", "3", "-b", "y", "-shell", "no", mpiexec, "-n", "3", whole.python,
                 str(whole.tree / "tests" / "jobs" / "contract_job.py"))
    whole.wait()
    assert "CONTRACT RESULT passed=5 failed=0" in whole.output(0), whole.report()
    assert whole.accounting({0})[0]["exit_status"] == "0", whole.report()
    whole.finish()


#: Items of 3 s on 2 one-thread workers (24 s of work) against h_rt=45 s and a 30 s
#: drain margin, so a drain some 15 s into each run.  With 2 calls in flight per thread
#: the first run has sent 8-12 items by then (the rest wait for the rerun), and the
#: rerun sends its 4-8 before its own drain.  (The Slurm twin once sent all of a map
#: too short for its threads before the drain, and nothing was left to requeue.)
H_RT_ITEMS, H_RT_SECONDS = 16, 3.0


@pytest.mark.timeout(240)
def test_an_h_rt_job_drains_exits_99_and_its_rerun_completes_every_item_once(array):
    """Grid Engine's h_rt: the run drains before the limit and exits 99 (requeue: the job
    is rescheduled, qsub -r y); the rerun (RESTARTED=1) resumes from the journal, and the
    job ends with status 0, every item computed once, the results of a plain run."""
    job = array("h-rt", HPCFUTURES_DRAIN_MARGIN="30", HPCFUTURES_THREADS_PER_WORKER="1")
    job.submit("-r", "y", "-l", "h_rt=0:0:45", "-pe", "smp", "2", "-b", "y", "-shell", "no",
               job.python, str(job.tree / "tests" / "jobs" / "requeue_job.py"), str(job.out),
               str(H_RT_ITEMS), str(H_RT_SECONDS))
    job.wait(deadline=200)
    output = job.output(0)
    runs = output.split("RUN 1")
    assert "RUN 0" in output and len(runs) == 2 and "DONE" in runs[1], job.report()
    assert "requeueing Grid Engine job" in runs[0] and "exit status 99" in runs[0], job.report()
    assert f"resumed 0 of {H_RT_ITEMS} calls" in runs[0], job.report()
    assert f"resumed 0 of {H_RT_ITEMS} calls" not in runs[1], job.report()
    records = _qacct(job.job)
    assert records and records[0]["exit_status"] == "0", (records, job.report())
    markers = sorted(int(p.name.split(".")[0]) for p in (job.out / "markers").iterdir())
    assert markers == list(range(H_RT_ITEMS)), job.report()  # each item computed once
    assert json.loads((job.out / "results").read_text()) == [
        i * i for i in range(H_RT_ITEMS)], job.report()
    job.finish()
