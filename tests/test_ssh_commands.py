"""The commands hpcfutures sends through ssh (issue 27): built right, quoted right.

Pure command building, no sshd: the scripts are run by a real ``/bin/sh`` (and
the remote command by a real ``tcsh``, a login shell some clusters still give),
with file names chosen to break any quoting that is not airtight.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess

import pytest
from helpers import require

import hpcfutures
from hpcfutures._ssh import shell
from hpcfutures._ssh.openssh import login_failure

#: Names that break naive quoting in sh, bash or csh.
NASTY = ["with space", "it's", 'say "hi"', "$HOME", "`id`", "semi;colon", "bang!", "new\nline",
         "-leading-dash", "*glob?", "back\\slash", "tab\there"]


def run_sh(lines, **kwargs):
    return subprocess.run(["/bin/sh", "-s"], input=shell.script(lines), text=True,
                          capture_output=True, timeout=10, **kwargs)


# ------------------------------------------------------------ targets and paths
@pytest.mark.parametrize("bad", ["", "  ", "-oProxyCommand=touch /tmp/x", "host name", "-p22"])
def test_a_target_that_is_an_option_or_blank_is_refused(bad):
    with pytest.raises(ValueError, match="ssh target"):
        shell.validate_target(bad)
    with pytest.raises(ValueError):
        hpcfutures.SSH(bad)


def test_scp_style_locations_are_split_as_scp_does():
    assert shell.split_remote("cluster:~/hpcfutures-1.json") == ("cluster", "~/hpcfutures-1.json")
    assert shell.split_remote("me@login.example.org:/scratch/f.json") == (
        "me@login.example.org", "/scratch/f.json")
    assert shell.split_remote("cluster:") == ("cluster", ".")
    for local in ["/home/me/f.json", "./a:b.json", "f.json", "dir/a:b", "C:\\f.json"]:
        assert shell.split_remote(local) is None, local


def test_remote_paths_expand_only_the_tilde_with_the_remote_home():
    assert shell.remote_path("~", "/home/alice") == "/home/alice"
    assert shell.remote_path("~/.hpcfutures/jobs", "/home/alice/") == \
        "/home/alice/.hpcfutures/jobs"
    assert shell.remote_path("jobs/$USER", "/home/alice") == "/home/alice/jobs/$USER"
    assert shell.remote_path("/scratch/x", "/home/alice") == "/scratch/x"
    with pytest.raises(ValueError, match="~user"):
        shell.remote_path("~bob/x", "/home/alice")


def test_scheduler_addresses_are_split_into_scheme_host_and_port():
    assert shell.split_address("tls://10.77.0.11:40123") == ("tls", "10.77.0.11", 40123)
    assert shell.split_address("tcp://[fe80::1]:8786") == ("tcp", "fe80::1", 8786)
    with pytest.raises(ValueError):
        shell.split_address("10.0.0.1:80")


def test_ssh_G_output_is_read_as_a_dict():
    config = shell.parse_config("hostname 10.88.2.1\nport 2222\nproxyjump bastion\n"
                                "controlpath /home/me/.ssh/cm-%C\nidentityfile a\nidentityfile b\n")
    assert config["hostname"] == "10.88.2.1" and config["proxyjump"] == "bastion"
    assert config["identityfile"] == "a"


# ------------------------------------------------------------ the ssh commands
def test_commands_never_prompt_never_become_a_master_and_never_log_in_again():
    argv = shell.mux_command("cluster", "/tmp/hpcf-ssh-x/%C", connect_timeout=20,
                             options=["Port=2222"])
    text = " ".join(argv)
    assert argv[0] == "ssh" and argv[-3:] == ["cluster", "/bin/sh", "-s"]
    for wanted in ("BatchMode=yes", "ControlMaster=no", "ControlPath=/tmp/hpcf-ssh-x/%C",
                   "ConnectTimeout=20", "ProxyCommand=false", "Port=2222"):
        assert wanted in argv, wanted
    assert "StrictHostKeyChecking" not in text and "UserKnownHostsFile" not in text


def test_the_master_is_the_only_step_that_may_prompt_and_its_log_is_a_file():
    argv = shell.master_command("cluster", "/tmp/c/%C", "/tmp/c/master.log", connect_timeout=30)
    assert {"-M", "-N", "-f"} <= set(argv) and argv[argv.index("-E") + 1] == "/tmp/c/master.log"
    assert "BatchMode=yes" not in argv  # it may ask for a password or a second factor
    assert "StrictHostKeyChecking" not in " ".join(argv)
    assert argv[-1] == "cluster"


def test_the_login_shell_sees_only_two_plain_words():
    """Whatever the login shell (bash, tcsh, fish), it gets "/bin/sh -s": nothing in
    it that any shell would expand, so every quoted thing travels on stdin."""
    remote = " ".join(shell.REMOTE_SHELL)
    assert remote == "/bin/sh -s"
    assert not set(remote) & set("$`'\"\\!*?[]{}~;&|<>()#%\n")


def test_a_tcsh_login_shell_runs_the_script_sent_on_stdin(tmp_path):
    """As sshd runs a command: ``<login shell> -c "<command>"``, the script on stdin."""
    # ci/ssh-lab-up.sh installs tcsh (the lab's login shell): under CI=true never skipped.
    require(shutil.which("tcsh") is not None, "tcsh (apt-get install tcsh)")
    target = tmp_path / "it's $HOME `id` !x"
    text = "line 1\n$HOME `id` 'quoted' \"double\" !bang\n"
    done = subprocess.run(["tcsh", "-c", " ".join(shell.REMOTE_SHELL)], text=True,
                          input=shell.script([*shell.file_writer(str(target), text),
                                              *shell.file_reader(str(target))]),
                          capture_output=True, timeout=10)
    assert done.returncode == 0, done.stderr
    assert shell.parse_private(done.stdout, str(target)) == ("ok", text)


# ------------------------------------------------------------ files, for real in sh
@pytest.mark.parametrize("name", NASTY)
def test_a_file_written_and_read_back_survives_any_name_and_content(tmp_path, name):
    path = tmp_path / "sub dir" / name
    text = f"#!/bin/bash\necho {shlex.quote(name)}\n$(rm -rf /) `reboot` EOF\n'\"\n"
    done = run_sh([*shell.file_writer(str(path), text, 0o700), *shell.file_reader(str(path))])
    assert done.returncode == 0, done.stderr
    assert path.read_text() == text and (path.stat().st_mode & 0o777) == 0o700
    assert (path.parent.stat().st_mode & 0o077) == 0  # folders it makes are private
    assert shell.parse_private(done.stdout, str(path)) == ("ok", text)


def test_a_private_file_is_read_with_its_owner_and_mode(tmp_path):
    path = tmp_path / "scheduler.json"
    path.write_text('{"hpcfutures": 1}\n')
    os.chmod(path, 0o600)
    done = run_sh(shell.file_reader(str(path)))
    assert shell.parse_private(done.stdout, str(path)) == ("ok", '{"hpcfutures": 1}\n')
    os.chmod(path, 0o640)
    verdict, text = shell.parse_private(run_sh(shell.file_reader(str(path))).stdout, str(path))
    assert "other users could read" in verdict and text == ""


def test_an_absent_file_is_said_to_be_absent(tmp_path):
    done = run_sh(shell.file_reader(str(tmp_path / "none.json")))
    assert done.returncode == 0 and shell.parse_private(done.stdout, "x") == ("absent", "")


def test_a_file_of_another_user_is_refused():
    verdict, text = shell.parse_private("hpcf file 1000 0 600\nsecret", "/f")
    assert "owned by uid 0, not by you (uid 1000)" in verdict and text == ""


def test_setup_runs_first_in_the_login_environment():
    text = shell.script(["sbatch x"], setup="module load slurm")
    assert text.splitlines() == [". /etc/profile >/dev/null 2>&1 || :", "module load slurm",
                                 "sbatch x"]
    assert shell.script(["true"]) == "true\n"


# ------------------------------------------------------------ messages
def test_an_unknown_host_key_is_explained_and_says_nothing_was_submitted():
    said = login_failure("cluster", 255, "Host key verification failed.\n")
    assert "known_hosts" in said and "Nothing was done on the cluster" in said
    assert "Host key verification failed" in said


def test_a_refused_login_is_explained():
    said = login_failure("cluster", 255, "alice@10.88.2.1: Permission denied (publickey).")
    assert "refused" in said and "ssh cluster" in said


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memory files are Linux's")
def test_credentials_read_through_ssh_build_tls_contexts_without_touching_the_disk(monkeypatch):
    """Dask writes PEM text to a temporary folder to load it; memory files spare that."""
    import distributed.security

    from hpcfutures import _dask
    from hpcfutures._ssh.memfiles import in_memory_files
    from hpcfutures._support.security import new_credentials

    credentials = new_credentials()
    paths = in_memory_files(credentials)
    assert all(path.startswith("/proc/self/fd/") for path in paths.values())
    assert in_memory_files(credentials) == paths  # one memory file per PEM, kept
    key = pathlib.Path(paths["key"])
    assert key.read_text() == credentials["key"] == key.read_text()

    def no_temporary_files(*args, **kwargs):
        raise AssertionError("a temporary folder for the credentials")

    monkeypatch.setattr(distributed.security.tempfile, "TemporaryDirectory", no_temporary_files)
    for role in ("client", "worker"):
        context = _dask.make_security(paths).get_connection_args(role)["ssl_context"]
        assert context.verify_mode.name == "CERT_REQUIRED"


def test_an_scp_style_path_with_ssh_given_too_is_the_path_on_that_cluster():
    """``connect("cluster:~/x.json", ssh=SSH("cluster"))`` looked for a file named
    ``cluster:~/x.json`` in the remote home; another cluster in the path is refused."""
    from hpcfutures import SSH
    from hpcfutures._facade.outside.remote import remote_location

    ssh = SSH("cluster")
    assert remote_location("cluster:~/x.json", ssh) == (ssh, "~/x.json")
    assert remote_location("cluster:~/x.json", "cluster") == ("cluster", "~/x.json")
    assert remote_location("~/x.json", ssh) == (ssh, "~/x.json")
    assert remote_location("cluster:~/x.json", None) == ("cluster", "~/x.json")
    with pytest.raises(ValueError, match="names the cluster 'other', but ssh= names 'cluster'"):
        remote_location("other:~/x.json", ssh)
