"""What every launcher plug-in reads the same way: integers, MPI rank variables, commands.

One integer reader (``_batchenv.int_var``), one table of the variables MPI
launchers set, one runner for batch-system commands; each used by every
plug-in, so their messages are tested once here, on fake environments.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from hpcfutures import LauncherError
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import _batchenv, _slurm_array, mpi
from hpcfutures.launchers._batchenv import (
    MPI_RANK_VARIABLES,
    int_var,
    mpi_launched,
    parse_int,
    run_command,
)
from hpcfutures.launchers._slurm_env import foreign_mpi_launch
from hpcfutures.launchers.lsf import LSFLauncher
from hpcfutures.launchers.run import RunLauncher


# ------------------------------------------------------------------ integers
def test_int_var_reads_an_integer_and_treats_unset_or_empty_as_absent():
    env = {"A": "12", "B": " 3 ", "E": ""}
    assert int_var(env, "A", "Slurm") == 12
    assert int_var(env, "B", "Slurm") == 3
    assert int_var(env, "E", "Slurm") is None
    assert int_var(env, "MISSING", "Slurm") is None


def test_a_garbled_integer_names_the_variable_value_launcher_and_what_to_do():
    with pytest.raises(LauncherError) as caught:
        int_var({"SLURM_PROCID": "one"}, "SLURM_PROCID", "Slurm")
    message = str(caught.value)
    for fragment in ("SLURM_PROCID='one' is not an integer", "Slurm task environment",
                     "launcher=...", "HPCFUTURES_LAUNCHER"):
        assert fragment in message


def test_a_required_integer_that_is_missing_says_how_to_start_the_script():
    with pytest.raises(LauncherError) as caught:
        int_var({}, "HPCFUTURES_RANK", "'hpcfutures run'", required=True)
    message = str(caught.value)
    for fragment in ("HPCFUTURES_RANK is not set", "through 'hpcfutures run'",
                     "launcher=...", "HPCFUTURES_LAUNCHER"):
        assert fragment in message
    assert int_var({"X": "0"}, "X", "Slurm", required=True) == 0


def test_parse_int_names_what_it_read():
    assert parse_int(" 7", "the slot count", "LSF") == 7
    with pytest.raises(LauncherError, match="the slot count 'x' in LSB_MCPU_HOSTS"):
        parse_int("x", "the slot count 'x' in LSB_MCPU_HOSTS", "LSF")


@pytest.mark.parametrize("env, fragment", [
    ({"HPCFUTURES_SIZE": "2"}, "HPCFUTURES_RANK is not set"),
    ({"HPCFUTURES_RANK": "x", "HPCFUTURES_SIZE": "2", "HPCFUTURES_LAUNCH_ID": "a"},
     "HPCFUTURES_RANK='x' is not an integer; is this really a 'hpcfutures run' task"),
])
def test_the_local_launcher_reads_its_integers_the_same_way(env, fragment):
    launcher = RunLauncher(resolve_settings(environ={}, dask_config={}), env)
    with pytest.raises(LauncherError, match=fragment):
        launcher.identity()


def test_the_mpi_plugin_refuses_a_garbled_size_instead_of_ignoring_it():
    env = {"PMI_RANK": "0", "PMI_SIZE": "four"}
    with pytest.raises(LauncherError, match=r"PMI_SIZE='four' is not an integer.*MPI"):
        mpi.declared_size(env)


def test_lsf_slots_come_from_this_hosts_pair_and_a_garbled_one_is_named():
    settings = resolve_settings(environ={}, dask_config={})
    ok = LSFLauncher(settings, {"LSB_JOBID": "9", "LSB_MCPU_HOSTS": "hostA 6 hostB 2"})
    assert ok.slots() == (6, "LSB_MCPU_HOSTS (this host's slots)")
    bad = LSFLauncher(settings, {"LSB_JOBID": "9", "LSB_MCPU_HOSTS": "hostA six"})
    with pytest.raises(LauncherError, match="'six' in LSB_MCPU_HOSTS"):
        bad.slots()


# ----------------------------------------------------------- MPI's variables
def test_one_table_of_mpi_rank_variables_serves_every_plugin():
    assert mpi.MPI_RANK_VARIABLES is MPI_RANK_VARIABLES
    for rank_var, _, who in MPI_RANK_VARIABLES:
        env = {rank_var: "3"}
        assert mpi.mpi_rank_variable(env)[0] == rank_var and who
        assert rank_var in (mpi_launched(env) or "")
        slurm_step = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4",
                      rank_var: "3"}
        assert rank_var in (foreign_mpi_launch(slurm_step) or "")


# ------------------------------------------------------------------- commands
def test_run_command_returns_the_result_of_a_command_that_worked():
    result = run_command([sys.executable, "-c", "print('ok')"], "say ok")
    assert result is not None and result.stdout.strip() == "ok"


def test_run_command_passes_an_environment():
    result = run_command([sys.executable, "-c", "import os; print(os.environ['HF_X'])"],
                         "read a variable", env={"HF_X": "%s"})
    assert result is not None and result.stdout.strip() == "%s"


@pytest.mark.parametrize("command, why", [
    (["/nonexistent/qstat", "-x"], "'/nonexistent/qstat -x' could not run"),
    ([sys.executable, "-c", "import sys; sys.exit('no such job')"],
     "failed with status 1: no such job"),
])
def test_a_failed_command_is_a_warning_saying_what_why_and_what_else(caplog, command, why):
    with caplog.at_level(logging.WARNING, logger="hpcfutures"):
        assert run_command(command, "delete job 5", otherwise="delete it yourself") is None
    assert "could not delete job 5" in caplog.text
    assert why in caplog.text
    assert "delete it yourself" in caplog.text


def test_a_command_that_hangs_is_stopped_at_its_deadline(caplog, monkeypatch):
    monkeypatch.setattr(_batchenv, "COMMAND_TIMEOUT", 0.5)
    with caplog.at_level(logging.WARNING, logger="hpcfutures"):
        assert run_command([sys.executable, "-c", "import time; time.sleep(30)"],
                           "ask a busy controller") is None
    assert "did not finish within 0.5 s" in caplog.text


def test_slurm_asks_for_the_submit_time_through_the_one_runner(monkeypatch):
    calls = []

    def fake_run(command, **kwargs):
        calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, 0, "JobId=5 SubmitTime=1700000000 x", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert _slurm_array.submit_time("5") == 1700000000.0
    (command, kwargs), = calls
    assert command == ["scontrol", "-o", "show", "job", "5"]
    assert kwargs["env"]["SLURM_TIME_FORMAT"] == "%s"
    assert kwargs["timeout"] == _batchenv.COMMAND_TIMEOUT
