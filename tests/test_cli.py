"""The hpcfutures command guides a newcomer: an overview, one-line usage errors, info that
still explains itself when a setting is wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpcfutures._cli import SUBCOMMANDS, main


def test_bare_command_lists_every_subcommand_with_an_example(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    for command in SUBCOMMANDS:
        assert f"  {command.name}  " in out or f"  {command.name} " in out, out
        assert f"$ {command.example}\n" in out + "\n", out
    # python -m hpcfutures is the same command
    done = subprocess.run([sys.executable, "-m", "hpcfutures"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout.strip() == out.strip()


@pytest.mark.parametrize("copies", ["0", "-1"])
def test_run_with_no_copies_is_a_one_line_error(copies, capsys):
    assert main(["run", "-n", copies, sys.executable, "-c", "pass"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and f"at least 1, not {copies}" in captured.err


def test_run_without_n_says_how_many_copies_it_starts(capfd):
    assert main(["run", sys.executable, "-c", "pass"]) == 0
    assert "starting 4 copies of " in capfd.readouterr().err


def test_info_explains_the_launch_even_with_a_wrong_setting(monkeypatch, capsys):
    """Two copies (too few for the roles) and an invalid timeout: both errors are named,
    and the launcher, rank and why are still shown."""
    for name, value in {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "2",
                        "HPCFUTURES_LAUNCH_ID": "xyz", "HPCFUTURES_TIMEOUT": "abc"}.items():
        monkeypatch.setenv(name, value)
    assert main(["info", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["launcher"] == "run" and report["rank"] == 1 and report["size"] == 2
    assert any("HPCFUTURES_RANK" in line for line in report["why"])
    assert report["role"] == "none (see error)"
    assert "HPCFUTURES_TIMEOUT" in report["error"] and "NotEnoughRanksError" in report["error"]
    assert report["settings"]["timeout"]["source"] == "default (see error)"


def test_run_knows_a_serving_launch_by_its_command():
    """A serving launch has no client: hpcfutures run must not take rank 1 for one."""
    from hpcfutures._cli.run import serves

    assert serves(["hpcfutures", "serve", "--scheduler-file", "f.json"])
    assert serves(["/opt/venv/bin/hpcfutures", "serve"])
    assert serves(["python3", "-m", "hpcfutures", "serve", "--scheduler-file", "f.json"])
    assert not serves(["python3", "job.py", "serve"])
    assert not serves(["hpcfutures", "info"])
    assert not serves(["python3", "-m", "hpcfutures", "info"])
    assert not serves(["python3", "-m"])
