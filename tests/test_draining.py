"""Knowing the allocation's end, draining before it, and requeueing the job.

Parsers are fed real-looking command output; Slurm's and Grid Engine's end
are also asked of the local systems; the drain decision runs against a fake
bridge and clock; one laptop executor drains for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import pytest
from helpers import (
    FINAL_STATES,
    ROOT,
    Batch,
    assert_no_leftovers,
    have_command,
    job_facts,
    require,
    slurm_is_up,
    wait_until,
)

import hpcfutures
from hpcfutures._errors import ConfigurationError
from hpcfutures._facade.core.batching import Batcher
from hpcfutures._facade.resuming import draining
from hpcfutures._facade.resuming.draining import DRAIN_FLOOR, Drain, default_margin
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import _requeue
from hpcfutures.launchers._endtime import (
    AllocationEnd,
    find_end,
    parse_clock,
    parse_lsf_time_left,
    parse_pbs_end,
    parse_sge_h_rt,
    parse_slurm_end,
)

QSTAT_J = """==============================================================
job_number:                 108
exec_file:                  job_scripts/108
submission_time:            Mon Nov 30 20:53:07 2026
owner:                      root
hard resource_list:         h_vmem=2G,h_rt=1:30:00
mail_list:                  root@localhost
notify:                     FALSE
job_name:                   sge.sh
"""

QSTAT_F = """Job Id: 4242.pbs01
    Job_Name = sweep
    job_state = R
    Resource_List.ncpus = 8
    Resource_List.walltime = 02:00:00
    stime = Mon Nov 30 20:53:06 2026
    session_id = 1234
"""


def _ran(stdout: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], 0, stdout, "")


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600), ("1:30:00", 5400), ("01:00:00", 3600), ("5:00", 300),
    ("2-00:00:00", 172800), ("soon", None)])
def test_limits_are_read_as_seconds(text, seconds):
    assert parse_clock(text) == seconds


def test_each_batch_systems_answer_is_parsed():
    assert parse_slurm_end("1796071986\n") == 1796071986
    assert parse_slurm_end("NONE\n") is None and parse_slurm_end("") is None
    assert parse_sge_h_rt(QSTAT_J) == 5400
    assert parse_sge_h_rt(QSTAT_J.replace("h_vmem=2G,h_rt=1:30:00", "h_vmem=2G")) is None
    start = time.mktime(time.strptime("Mon Nov 30 20:53:06 2026", "%a %b %d %H:%M:%S %Y"))
    assert parse_pbs_end(QSTAT_F) == start + 7200
    assert parse_pbs_end(QSTAT_F.replace("    stime", "    xtime")) is None
    assert parse_lsf_time_left("1:23 L\n") == 1 * 3600 + 23 * 60
    assert parse_lsf_time_left("-\n") is None


def test_the_end_time_setting_takes_epoch_seconds_or_an_iso_time():
    settings = resolve_settings(environ={"HPCFUTURES_END_TIME": "2026-11-30T21:30:00+00:00"},
                                dask_config={})
    assert settings.end_time == 1796074200
    assert resolve_settings({"end_time": 1796074200}, environ={}, dask_config={}).end_time \
        == 1796074200
    with pytest.raises(ConfigurationError, match=r"HPCFUTURES_END_TIME.*ISO time"):
        resolve_settings(environ={"HPCFUTURES_END_TIME": "tomorrow"}, dask_config={})


def test_the_setting_wins_then_each_system_is_asked(tmp_path):
    asked: list = []

    def run(command, purpose, **kwargs):
        asked.append((command, kwargs.get("env", {}).get("SLURM_TIME_FORMAT")))
        return _ran({"squeue": "1796071986\n", "qstat": QSTAT_J}[command[0]])

    assert find_end(12.0, "end_time from the keyword argument", {"SLURM_JOB_ID": "7"},
                    run) == AllocationEnd(12.0, "end_time from the keyword argument")
    assert not asked
    assert find_end(None, environ={"SLURM_JOB_ID": "7"}, run=run).epoch == 1796071986
    assert asked == [(["squeue", "-h", "-j", "7", "-o", "%e"], "%s")]
    (tmp_path / "config").write_text("submission_time=1\n")
    os.utime(tmp_path / "config", (1000, 1000))
    end = find_end(None, environ={"JOB_ID": "108", "SGE_ROOT": "/sge",
                                  "SGE_JOB_SPOOL_DIR": str(tmp_path)}, run=run)
    assert end == AllocationEnd(1000 + 5400, "Grid Engine: h_rt=5400 s of job 108")
    assert find_end(None, environ={}, run=run) is None


def test_a_failing_command_means_no_known_end():
    assert find_end(None, environ={"PBS_JOBID": "1.pbs"}, run=lambda *a, **k: None) is None


# ---------------------------------------------------------- the real systems
@pytest.mark.timeout(120)
def test_slurm_says_when_the_job_ends():
    require(slurm_is_up(), "a running Slurm (bash ci/slurm-up.sh)")
    script = ("import os, subprocess; from hpcfutures.launchers._endtime import find_end; "
              "end = find_end(None); out = subprocess.run(['scontrol', 'show', 'job', "
              "os.environ['SLURM_JOB_ID']], capture_output=True, text=True, "
              "env={**os.environ, 'SLURM_TIME_FORMAT': '%s'}).stdout; "
              "print('END', end.epoch, out.split('EndTime=')[1].split()[0], end.source)")
    result = subprocess.run(["srun", "-n1", "-t", "2", "-J", f"hpcf-end-{uuid.uuid4().hex[:8]}",
                             sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=90, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next(line for line in result.stdout.splitlines() if line.startswith("END"))
    _, found, scontrol, *source = line.split()
    assert float(found) == float(scontrol), result
    assert " ".join(source).startswith("Slurm: squeue -j "), line


@pytest.mark.timeout(120)
def test_grid_engine_h_rt_and_the_job_start_give_the_end(tmp_path):
    require(have_command("qsub") and os.geteuid() == 0, "a running Grid Engine (ci/sge-up.sh)")
    out = Path(f"/tmp/hpcfutures-end-{uuid.uuid4().hex[:8]}")
    out.mkdir()
    os.chmod(out, 0o777)
    script = out / "job.sh"
    script.write_text(f"#!/bin/bash\ndate +%s > {out}/started\nenv > {out}/env\n"
                      f"qstat -j $JOB_ID > {out}/qstat.tmp && mv {out}/qstat.tmp {out}/qstat\n"
                      "sleep 60\n")
    job = subprocess.run(["qsub", "-terse", "-l", "h_rt=0:7:0", "-o", "/dev/null", "-j", "y",
                          str(script)], capture_output=True, text=True, timeout=30)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    try:
        wait_until(lambda: (out / "qstat").exists(), 60, f"Grid Engine job {job_id} to start")
        environ = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines()
                       if "=" in line)
        end = find_end(None, environ=environ,
                       run=lambda *a, **k: _ran((out / "qstat").read_text()))
        started = float((out / "started").read_text())
        assert end is not None and end.source == f"Grid Engine: h_rt=420 s of job {job_id}"
        # The spool directory is written as the job starts; the script runs soon after
        # (seconds later on a loaded machine).
        assert started - 60 <= end.epoch - 420 <= started + 1, (end, started)
    finally:
        subprocess.run(["qdel", job_id], capture_output=True, timeout=30)


# ------------------------------------------------------------- the decision
class FakeBridge:
    """What a Drain needs of a TaskBridge: a batcher, the drain, timers."""

    def __init__(self) -> None:
        self.batcher = Batcher(lambda: 1)
        self.drained = None
        self.refused = 0
        self.timers: list = []
        self.closing = False

    def journal_note(self):
        return "the journal at /scratch/j holds 12 results"

    def journal_added(self):
        return 12

    def ended(self):
        return self.closing

    def call_later(self, delay, callback):
        self.timers.append(delay)

    def drain(self, error):
        self.drained = error
        self.refused = 5
        return 5


def _settings(**given):
    return resolve_settings(given, environ={}, dask_config={})


def test_the_default_margin_is_twice_the_longest_call_with_a_floor():
    assert default_margin(None) == DRAIN_FLOOR
    assert default_margin(1.0) == DRAIN_FLOOR
    assert default_margin(100.0) == 200.0
    bridge = FakeBridge()
    drain = Drain(bridge, _settings())
    assert drain.margin() == DRAIN_FLOOR
    bridge.batcher.durations.record(len, 40.0)
    assert drain.margin() == 80.0
    assert Drain(bridge, _settings(drain_margin="5min")).margin() == 300.0


def test_the_drain_starts_when_the_margin_is_reached():
    now = [1000.0]
    bridge = FakeBridge()
    drain = Drain(bridge, _settings(drain_margin=60), clock=lambda: now[0])
    drain.end = AllocationEnd(1100.0, "Slurm: squeue -j 7")
    drain.check()
    assert bridge.drained is None and bridge.timers == [draining.CHECK_EVERY]
    now[0] = 1038.0
    drain.check()
    assert bridge.drained is None and bridge.timers[-1] == pytest.approx(2.0)
    now[0] = 1040.0
    drain.check()
    error = bridge.drained
    assert isinstance(error, hpcfutures.TimeLimitError) and isinstance(error, RuntimeError)
    text = str(error)
    assert "not started" in text and "Slurm: squeue -j 7" in text and "60 s before" in text
    assert "holds 12 results" in text and "same journal to resume" in text
    assert "requeue=True" in text
    bridge.closing, bridge.drained = True, None
    drain.check()  # an executor that is ending needs no drain
    assert bridge.drained is None


def test_without_a_journal_the_message_says_a_rerun_starts_over():
    bridge = FakeBridge()
    bridge.journal_note = lambda: None  # type: ignore[method-assign]
    drain = Drain(bridge, _settings(drain_margin=60), clock=lambda: 0.0)
    drain.end = AllocationEnd(10.0, "end_time from the keyword argument")
    drain.check()
    assert "rerun starts over" in str(bridge.drained)
    assert "Executor(journal=PATH)" in str(bridge.drained)


# ------------------------------------------------------------------ requeue
def test_requeue_runs_each_systems_command_and_counts(tmp_path):
    ran: list = []

    def run(command, purpose, **kwargs):
        ran.append(command)
        return _ran("MaxBatchRequeue         = 5\n" if command[1:] == ("show", "config")
                    else "")

    slurm = {"SLURM_JOB_ID": "55", "SLURM_RESTART_COUNT": "1"}
    outcome = _requeue.requeue_job(3, "then", slurm, tmp_path, run, added=12)
    assert outcome.requeued and ran[-1] == ("scontrol", "requeue", "55")
    assert "requeue 2; this run recorded 12 new result(s)" in outcome.message
    # Slurm's own cap on requeues stops it, whatever progress it makes; and says so.
    capped = _requeue.requeue_job(3, "", {**slurm, "SLURM_RESTART_COUNT": "5"}, tmp_path, run,
                                  added=12)
    assert not capped.requeued and "Slurm's MaxBatchRequeue=5 allows no more" in capped.message
    ran.clear()
    sge = {"JOB_ID": "108", "SGE_ROOT": "/sge"}
    for attempt in (1, 2):
        outcome = _requeue.requeue_job(2, "", sge, tmp_path, run)
        assert outcome.requeued and f"exit status 99; requeue {attempt}; no journal" in (
            outcome.message)
    assert not _requeue.requeue_job(2, "", sge, tmp_path, run).requeued
    assert ran == []  # Grid Engine's requeue is the exit status
    assert _requeue.requeue_job(3, "", {"PBS_JOBID": "9.pbs"}, tmp_path, run).requeued
    assert _requeue.requeue_job(3, "", {"LSB_JOBID": "9"}, tmp_path, run).requeued
    assert ran == [("qrerun", "9.pbs"), ("brequeue", "9")]
    failed = _requeue.requeue_job(3, "", {"LSB_JOBID": "10"}, tmp_path, lambda *a, **k: None)
    assert not failed.requeued
    alone = _requeue.requeue_job(3, "", {}, tmp_path, run)
    assert not alone.requeued and "not a Slurm, Grid Engine, PBS or LSF batch job" in alone.message


def test_only_runs_in_a_row_without_new_results_count_against_max_requeues(tmp_path):
    """A week-long sweep under a day's limit needs seven runs: each that records new
    results is progress, however many there were before; three runs in a row that record
    nothing stop it (max_requeues=3), and the message says that was why."""
    def run(command, purpose, **kwargs):
        return _ran("")

    sge = {"JOB_ID": "108", "SGE_ROOT": "/sge"}
    for added in (60, 55, 57, 56, 58, 0, 0, 40, 0, 0, 0):  # 11 runs: each one requeued
        outcome = _requeue.requeue_job(3, "", sge, tmp_path, run, added=added)
        assert outcome.requeued, outcome
    assert "no new result, 3 run(s) in a row; max_requeues=3 allows 3" in outcome.message
    stopped = _requeue.requeue_job(3, "", sge, tmp_path, run, added=0)
    assert not stopped.requeued
    assert ("recorded no new result in its last 4 runs (max_requeues=3 counts the runs in a "
            "row without progress)") in stopped.message


class FakePBS:
    """PBS's commands as an ordinary user meets them: qrerun refused, qstat and qsub fine."""

    def __init__(self, submitted: str, operator: bool = False) -> None:
        self.submitted, self.operator, self.ran = submitted, operator, []

    def __call__(self, command, purpose, **kwargs):
        self.ran.append(command)
        if command[0] == "qrerun":
            return _ran("") if self.operator else None  # run_command: None when it failed
        if command[0] == "qstat":
            return _ran(json.dumps({"Jobs": {"9.pbsvm": {
                "Submit_arguments": self.submitted,
                "Variable_List": {"PBS_O_WORKDIR": "/home/ada/sweep"}}}}))
        return _ran("10.pbsvm\n")  # sh -c 'cd ... && exec qsub ...'


def test_pbs_requeue_resubmits_the_job_for_an_ordinary_user(tmp_path):
    """qrerun is for operators; anyone else's job is submitted again, as qstat says it was,
    in its directory, with the count of requeues passed on (PBS gives it a new job id)."""
    pbs = FakePBS("<jsdl-hpcpa:Argument>-l</jsdl-hpcpa:Argument><jsdl-hpcpa:Argument>"
                  "walltime=00:01:30</jsdl-hpcpa:Argument><jsdl-hpcpa:Argument>sweep.sh"
                  "</jsdl-hpcpa:Argument>")
    outcome = _requeue.requeue_job(3, "", {"PBS_JOBID": "9.pbsvm"}, tmp_path, pbs)
    assert outcome.requeued, outcome
    assert pbs.ran[0] == ("qrerun", "9.pbsvm")
    assert pbs.ran[-1] == ("sh", "-c", 'cd "$0" && exec "$@"', "/home/ada/sweep", "qsub", "-v",
                           "HPCFUTURES_REQUEUES=1,HPCFUTURES_STALLED_RUNS=1", "-l",
                           "walltime=00:01:30", "sweep.sh")
    assert "resubmitted PBS job 9.pbsvm as job 10.pbsvm" in outcome.message
    assert "'qrerun' is for PBS operators and managers; requeue 1; no journal" in outcome.message
    # The resubmitted job counts on from there; its own -v list gets the count added.
    pbs = FakePBS("-v SEED=4 -l walltime=00:01:30 sweep.sh")
    again = {"PBS_JOBID": "10.pbsvm", "HPCFUTURES_REQUEUES": "1",
             "HPCFUTURES_STALLED_RUNS": "1"}
    assert _requeue.requeue_job(3, "", again, tmp_path, pbs, added=7).requeued
    assert pbs.ran[-1][-5:] == ("-v", "SEED=4,HPCFUTURES_REQUEUES=2,HPCFUTURES_STALLED_RUNS=0",
                                "-l", "walltime=00:01:30", "sweep.sh")
    stuck = {**again, "HPCFUTURES_STALLED_RUNS": "3"}
    capped = _requeue.requeue_job(3, "", stuck, tmp_path, pbs)
    assert not capped.requeued and "no new result in its last 4 runs" in capped.message


def test_pbs_requeue_uses_qrerun_where_allowed_and_says_why_it_cannot_resubmit(tmp_path):
    operator = FakePBS("sweep.sh", operator=True)
    outcome = _requeue.requeue_job(3, "", {"PBS_JOBID": "9.pbsvm"}, tmp_path, operator)
    assert outcome.requeued and operator.ran == [("qrerun", "9.pbsvm")]
    assert "'qrerun 9.pbsvm'" in outcome.message
    # Submitted through standard input (echo ... | qsub): there is no script to submit.
    piped = FakePBS("-l walltime=00:01:30")
    outcome = _requeue.requeue_job(3, "", {"PBS_JOBID": "11.pbsvm"}, tmp_path, piped)
    assert not outcome.requeued and "submitted through standard input" in outcome.message
    assert "operators and managers only" in outcome.message
    assert not any(command[0] == "sh" for command in piped.ran)


def test_the_time_limit_error_names_the_requeue_directive_of_the_batch_system():
    directive = _requeue.requeue_directive
    assert directive({"SLURM_JOB_ID": "5"}) == "#SBATCH --requeue"
    assert directive({"PBS_JOBID": "9.pbsvm"}) == "#PBS -r y"
    assert directive({"JOB_ID": "7", "SGE_ROOT": "/sge"}) == "#$ -r y"
    assert directive({"LSB_JOBID": "3"}) == "#BSUB -r"
    assert "#PBS -r y (PBS)" in directive({})


def test_only_a_drain_that_refused_calls_requeues(monkeypatch):
    calls: list = []
    monkeypatch.setattr(_requeue, "requeue_job",
                        lambda cap, then, added: calls.append((cap, then, added)) or
                        _requeue.RequeueOutcome(True, "requeued"))
    bridge = FakeBridge()
    drain = Drain(bridge, _settings(requeue=True, max_requeues=2))
    assert drain.requeue_if_wanted() is None  # never drained
    bridge.drained, bridge.refused = hpcfutures.TimeLimitError("x"), 0
    assert drain.requeue_if_wanted() is None  # drained, nothing left
    bridge.refused = 4
    assert drain.requeue_if_wanted() == _requeue.REQUEUED_STATUS
    assert calls == [(2, "its rerun resumes from the journal", 12)]
    assert Drain(bridge, _settings()).requeue_if_wanted() is None  # requeue not asked for


# ----------------------------------------------------- one drain, for real
def _slow(x):
    time.sleep(0.5)
    return x * 2


@pytest.mark.timeout(90)
def test_a_laptop_executor_drains_running_calls_finish_the_rest_fail_once(tmp_path):
    """Running calls finish and are yielded in order; the first item never sent raises
    TimeLimitError, and so does every later call; its message counts the journal's
    results; the launch ends as usual."""
    got: list = []
    with pytest.raises(hpcfutures.TimeLimitError) as raised:
        with hpcfutures.Executor(max_workers=2, end_time=time.time() + 3600,
                                 journal=str(tmp_path / "journal")) as executor:
            drain, bridge = executor._drain, executor._bridge
            wait_until(lambda: drain.end is not None, 30, "the end time to be known")
            results = executor.map(_slow, range(40))
            got.append(next(results))
            bridge.call_soon(drain.start)
            wait_until(lambda: bridge.drained is not None, 30, "the drain")
            with pytest.raises(hpcfutures.TimeLimitError):
                executor.submit(_slow, 1)
            for value in results:
                got.append(value)
    error = raised.value
    assert error is bridge.drained and bridge.refused >= 40 - len(got)
    assert 1 <= len(got) < 40 and got == [2 * i for i in range(len(got))]
    assert "not started" in str(error) and "end_time from the keyword argument" in str(error)
    held = int(str(error).split(" holds ")[1].split()[0])
    assert 0 <= held <= len(got) and "run the script again with the same journal" in str(error)


# ------------------------------------------------------ requeue, for real
#: A map of 120 s of work (40 items of 3 s) on 2 workers of 2 threads: ~30 s of wall
#: time, in a job of one minute (Slurm's smallest limit) drained 45 s before its end,
#: so after ~10 s of work, with at most 8 calls then in flight (2 per thread): it needs
#: a second run, which does a third or more.  (24 items once all ran in the first run.)
REQUEUE_ITEMS, REQUEUE_SECONDS = 40, 3.0
REQUEUE_MARGIN = "45"


@pytest.mark.timeout(300)
def test_a_slurm_job_drains_requeues_itself_and_completes_every_item_once(tmp_path):
    """sbatch --time=1 --requeue: a run drains before the limit and requeues the job;
    the rerun resumes from the journal; the job ends COMPLETED with every item computed
    exactly once and the results of a plain run."""
    require(slurm_is_up(), "a running Slurm (bash ci/slurm-up.sh)")
    batch = Batch(tmp_path, {"HPCFUTURES_MAX_WORKERS": "2",
                             "HPCFUTURES_THREADS_PER_WORKER": "2",
                             "HPCFUTURES_DRAIN_MARGIN": REQUEUE_MARGIN})
    try:
        job = batch.submit(
            f"exec {sys.executable} {ROOT / 'tests' / 'jobs' / 'requeue_job.py'} {tmp_path} "
            f"{REQUEUE_ITEMS} {REQUEUE_SECONDS}\n",
            "--time=1", "--requeue", "-n1", "-c4", "--open-mode=append",
            "-J", f"hpcf-requeue-{batch.marker[:8]}", "-o", str(tmp_path / "job.out"))
        facts = wait_until(lambda: _released(job), 240, f"job {job} to complete",
                           done=lambda facts: facts.get("JobState") in FINAL_STATES,
                           details=batch.outputs)
    finally:
        batch.cancel_all()
    output = batch.outputs()
    assert facts["JobState"] == "COMPLETED", output
    assert "RUN 0" in output and "RUN 1" in output and "DONE" in output, output
    assert "requeueing Slurm job" in output, output
    assert "requeue 1; this run recorded" in output, output  # what the run added
    # A planned drain is said as such, not as a failure of the client.
    assert "the executor drained" in output, output
    assert "ending the launch" not in output and "client failed" not in output, output
    assert f"resumed 0 of {REQUEUE_ITEMS} calls" in output.split("RUN 1")[0], output
    assert f"resumed 0 of {REQUEUE_ITEMS} calls" not in output.split("RUN 1")[1], output
    markers = sorted(int(p.name.split(".")[0]) for p in (tmp_path / "markers").iterdir())
    assert markers == list(range(REQUEUE_ITEMS)), output  # each item computed once
    assert json.loads((tmp_path / "results").read_text()) == [
        i * i for i in range(REQUEUE_ITEMS)], output
    assert_no_leftovers(batch.marker)


def _released(job: str) -> dict[str, str]:
    """The job's facts; a requeued job is let go in a few seconds (Slurm holds it back
    for two minutes, its BeginTime: AuthInfo's cred_expire plus one second).  Not at
    once: slurmd refuses a job whose new credential dates from the second in which it
    revoked the old one ("Job credential revoked"; the job then ends FAILED).  So the
    hold is first cut to 3 s; once those have passed, a second update (StartTime=now)
    makes slurmctld schedule the job at once, instead of at its next periodic pass
    (measured here: 10-25 s later).  The first run is left alone: it starts at submit."""
    facts = job_facts(job)
    restarts = facts.get("Restarts", "0")
    if facts.get("JobState") != "PENDING" or restarts == "0":
        return facts
    key = (job, restarts)
    if key not in _CUT:  # once per requeue: each update would push it back
        _CUT[key] = time.monotonic()
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+3"],
                       capture_output=True, timeout=30)
    elif key not in _NUDGED and time.monotonic() - _CUT[key] > 4:
        _NUDGED.add(key)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                       capture_output=True, timeout=30)
    return facts


#: When the hold of each (job, requeues so far) was cut to 3 s.
_CUT: dict[tuple[str, str], float] = {}
#: The (job, requeues so far) then told to start now.
_NUDGED: set[tuple[str, str]] = set()


def test_a_margin_of_zero_never_drains(monkeypatch):
    asked: list = []
    monkeypatch.setattr(draining, "find_end", lambda *a: asked.append(a))
    drain = Drain(FakeBridge(), _settings(drain_margin="0")).begin()
    assert drain._found.is_set() and drain.end is None and not asked
    with pytest.raises(ConfigurationError, match="drain_margin"):
        _settings(drain_margin=-5)


def test_a_map_accepted_just_before_the_drain_is_refused_not_left_waiting():
    from hpcfutures._facade.core.mapping import MapRun

    bridge = types.SimpleNamespace(batcher=Batcher(lambda: 1), refused=0, tally=None,
                                   drained=hpcfutures.TimeLimitError("drained"),
                                   wake=lambda: None)
    bridge.batcher.drain()
    run = MapRun(bridge, abs, [(-1,), (-2,)], 1).start()
    assert run.finished.is_set() and bridge.refused == 2
    with pytest.raises(hpcfutures.TimeLimitError, match="drained"):
        next(run.results(None))
