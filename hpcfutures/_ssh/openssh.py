"""The system's OpenSSH client: one control master per target, commands and forwards through it.

The user's own configuration decides everything ssh decides (aliases,
ProxyJump, agent, certificates, Kerberos, known hosts): ``ssh -G`` shows what it
resolves to.  A master already running at the user's ``ControlPath`` is reused
and left running; otherwise hpcfutures opens one (the only step that may ask
for a password or a second factor) in a private folder, and closes it at the
end.  Every other command runs with ``BatchMode=yes`` and a deadline, and fails
at once if the master has gone.  Host keys are checked as the user's ssh
checks them: nothing here relaxes that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence

from .._errors import SSHError
from .._support.backoff import Backoff
from . import shell
from .askpass import has_terminal, login

__all__ = ["SSH", "Connection", "InterruptedAfter", "Reach"]

logger = logging.getLogger("hpcfutures")


@dataclasses.dataclass(frozen=True)
class SSH:
    """Where and how to reach a cluster through ``ssh``, for ``allocate(ssh=...)`` and
    ``connect(..., ssh=...)``.

    Args:
        target: What ``ssh TARGET`` accepts: an alias of ``~/.ssh/config`` (with its
            ``ProxyJump``, agent, certificates, known hosts), or ``user@host``.
        python: The interpreter on the cluster that has hpcfutures installed (default
            ``python3`` on the remote PATH; allocate's ``python=`` wins over it).
        setup: Shell lines run on the login node before every command there, such as
            ``"module load slurm python/3.11"`` (non-interactive ssh loads no modules).
            Slurm jobs inherit the environment they set.
        options: Extra ``ssh -o`` options, such as ``("Port=2222",)``.
        command_timeout: Seconds each command on the cluster may take.
        login_timeout: Seconds the login (the master) may take, prompts included.
    """

    target: str
    python: str | None = None
    setup: str | None = None
    options: tuple[str, ...] = ()
    command_timeout: float = 60.0
    login_timeout: float = 120.0

    def __post_init__(self) -> None:
        shell.validate_target(self.target)
        object.__setattr__(self, "options", tuple(self.options))
        for name in ("command_timeout", "login_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SSH {name} must be more than 0 seconds, got "
                                 f"{getattr(self, name)!r}")


def as_ssh(ssh: str | SSH) -> SSH:
    return ssh if isinstance(ssh, SSH) else SSH(ssh)


class InterruptedAfter(KeyboardInterrupt):
    """A Ctrl-C that came while a command ran that must not be cut short (a
    submission: its job would be queued with nobody knowing its id); ``result``
    is the command's, finished."""

    def __init__(self, result: subprocess.CompletedProcess) -> None:
        super().__init__()
        self.result = result
        #: What the caller made of ``result`` (a job id) before passing the Ctrl-C on.
        self.job = ""


class Reach:
    """What the login node's sshd said when asked to open a connection onwards."""

    OPEN, REFUSED, PROHIBITED, FAILED = "open", "refused", "prohibited", "failed"


class Connection:
    """An open way to one target: the master (own or the user's), commands, forwards."""

    def __init__(self, ssh: SSH) -> None:
        self.ssh = ssh
        self.target = ssh.target
        self.config: dict[str, str] = {}
        self.control: str | None = None
        #: Whether hpcfutures opened the master (and so closes it).
        self.owned = False
        #: How many prompts (password, second factor) the login relayed from a notebook.
        self.prompts = 0
        self._folder: str | None = None
        self._forwards: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ the master
    def open(self) -> Connection:
        """Resolve the configuration, then reuse the user's master or open one.

        Raises :class:`SSHError` (nothing has happened on the cluster yet) when
        ssh is missing, the host key is unknown or changed, or the login fails.
        """
        if shutil.which("ssh") is None:
            raise SSHError("no ssh command on this machine: install OpenSSH's client "
                           "(on Windows, use WSL)")
        self.config = self.resolve()
        theirs = self.config.get("controlpath", "none")
        if theirs != "none" and self._check(theirs):
            self.control = theirs
            logger.info("ssh: reusing your control master for %s (%s)", self.target, theirs)
            return self
        self._folder = tempfile.mkdtemp(prefix="hpcf-ssh-", dir=_short_tmp())
        self.control = os.path.join(self._folder, "%C")
        log = os.path.join(self._folder, "master.log")
        command = shell.master_command(self.target, self.control, log,
                                       connect_timeout=min(30.0, self.ssh.login_timeout),
                                       options=self.ssh.options)
        try:
            if has_terminal():  # ssh asks there itself
                status = subprocess.run(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        timeout=self.ssh.login_timeout).returncode
            else:  # a notebook: its prompts come here, through SSH_ASKPASS
                status, self.prompts = login(command, self._folder, self.target,
                                             self.ssh.login_timeout)
        except (subprocess.TimeoutExpired, TimeoutError):
            self._forget_folder()
            raise SSHError(f"ssh {self.target}: no login within {self.ssh.login_timeout:g} s "
                           "(SSH(login_timeout=...) gives more time)") from None
        except BaseException:
            self._forget_folder()
            raise
        said = _read(log)
        if status != 0:
            self._forget_folder()
            raise SSHError(login_failure(self.target, status, said))
        self.owned = True
        logger.info("ssh: logged in to %s (control master %s)", self.target, self.control)
        return self

    def resolve(self) -> dict[str, str]:
        """``ssh -G``: the configuration ssh would use, resolved offline."""
        argv = ["ssh", "-G", *[w for o in self.ssh.options for w in ("-o", o)],
                shell.validate_target(self.target)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SSHError(f"ssh -G {self.target} did not answer within 30 s") from None
        if done.returncode != 0:
            raise SSHError(f"ssh cannot use {self.target!r}: {done.stderr.strip()}")
        return shell.parse_config(done.stdout)

    def _check(self, control: str) -> bool:
        return self._control(control, "check").returncode == 0

    def master_pid(self) -> int | None:
        """The master's process id, as it tells it."""
        if self.control is None:
            return None
        done = self._control(self.control, "check")
        found = re.search(r"pid=(\d+)", done.stderr + done.stdout)
        return int(found[1]) if done.returncode == 0 and found else None

    def alive(self) -> bool:
        return self.control is not None and self._check(self.control)

    def _control(self, control: str, verb: str, *extra: str) -> subprocess.CompletedProcess:
        argv = ["ssh", "-o", f"ControlPath={control}", "-O", verb, *extra,
                *[w for o in self.ssh.options for w in ("-o", o)], self.target]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 255, "", f"ssh -O {verb}: no answer in 30 s")

    def close(self) -> None:
        """Cancel this connection's forwards; end the master if hpcfutures opened it."""
        with self._lock:
            forwards, self._forwards = self._forwards, {}
        if self.control is not None and not self.owned:
            for (host, port), local in forwards.items():
                self._control(self.control, "cancel", "-L", f"127.0.0.1:{local}:{host}:{port}")
        if self.owned and self.control is not None:
            pid = self.master_pid()
            self._control(self.control, "exit")
            self.owned = False
            if pid is not None:
                _await_exit(pid, 5.0)
        self._forget_folder()

    def _forget_folder(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # ------------------------------------------------------------ commands
    def run(self, body: Sequence[str], what: str, *, timeout: float | None = None,
            setup: bool = True, finish: bool = False) -> subprocess.CompletedProcess:
        """Run an ``sh`` script on the login node; its exit status and output.

        Raises :class:`SSHError` when ssh itself failed (status 255: the master
        has gone, or the connection broke) or the deadline passed.  ``finish``:
        a Ctrl-C meanwhile lets the command end first, then raises
        :class:`InterruptedAfter` with its result.
        """
        text = shell.script(body, self.ssh.setup if setup else None)
        argv = shell.mux_command(self.target, self.control, options=self.ssh.options,
                                 connect_timeout=min(30.0, self.ssh.command_timeout))
        limit = self.ssh.command_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        # A session of its own: a Ctrl-C meant for Python must not kill the
        # scancel that the Ctrl-C itself asks for.
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        interrupted = False
        send: str | None = text
        with process:
            while True:
                try:
                    out, err = process.communicate(
                        send, timeout=max(0.0, deadline - time.monotonic()))
                    break
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
                    raise SSHError(f"could not {what} on {self.target}: no answer within "
                                   f"{limit:g} s") from None
                except KeyboardInterrupt:
                    if not finish:
                        process.kill()
                        raise
                    interrupted, send = True, None
        done = subprocess.CompletedProcess(argv, process.returncode, out, err)
        if done.returncode == 255:
            raise SSHError(lost_message(self.target, what, done.stderr))
        if interrupted:
            raise InterruptedAfter(done)
        return done

    # ------------------------------------------------------------ forwards
    def reach(self, host: str, port: int, timeout: float = 20.0) -> tuple[str, str]:
        """Ask the login node's sshd to connect to ``host:port`` (``ssh -W``, the same
        kind of channel as a forward): open, refused (nobody listens), or prohibited
        (the site allows no forwarding); with what ssh said.

        Through a master, both refusals read "Session open refused by peer"; the
        master's log (ours) says which.  A master of the user's keeps its log: then a
        second look, at the login node's own sshd, tells them apart."""
        log = os.path.join(self._folder, "master.log") if self._folder else None
        seen = len(_read(log)) if log else 0
        verdict, said = self._stdio(host, port, timeout)
        if verdict != Reach.REFUSED:
            return verdict, said
        if log:
            why = _read(log)[seen:]
            if "administratively prohibited" in why:
                return Reach.PROHIBITED, why.strip()
            return Reach.REFUSED, why.strip() or said
        sshd = self.config.get("hostname", ""), int(self.config.get("port", "22"))
        if sshd[0] and self._stdio(*sshd, timeout)[0] == Reach.REFUSED:
            return Reach.PROHIBITED, f"{said} (even to the login node's own sshd at " \
                f"{sshd[0]}:{sshd[1]})"
        return verdict, said

    def _stdio(self, host: str, port: int, timeout: float) -> tuple[str, str]:
        argv = shell.mux_command(self.target, self.control, options=self.ssh.options,
                                 connect_timeout=min(30.0, timeout), remote=(),
                                 extra=("-W", f"{_bracket(host)}:{port}"))
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return Reach.OPEN, "(the connection stayed open)"
        said = done.stderr.decode(errors="replace").strip()
        if "administratively prohibited" in said:
            return Reach.PROHIBITED, said
        if "open failed" in said or "refused by peer" in said:
            return Reach.REFUSED, said
        if done.returncode == 255 and said:
            return Reach.FAILED, said
        return Reach.OPEN, said

    def forward(self, host: str, port: int) -> int:
        """A local port on 127.0.0.1 that leads to ``host:port`` as the login node sees
        it (``ssh -O forward -L``); one per remote address, reused."""
        with self._lock:
            if (host, port) in self._forwards:
                return self._forwards[(host, port)]
        assert self.control is not None
        said = ""
        for _attempt in range(5):
            local = _free_port()
            done = self._control(self.control, "forward", "-L",
                                 f"127.0.0.1:{local}:{_bracket(host)}:{port}")
            if done.returncode == 0:
                with self._lock:
                    self._forwards[(host, port)] = local
                return local
            said = done.stderr.strip()
            if not self._check(self.control):
                break
        raise SSHError(f"ssh could not forward a local port to {host}:{port} through "
                       f"{self.target}: {said}")


def login_failure(target: str, status: int, said: str) -> str:
    """The message for a master that did not start: what ssh said, what to do."""
    said = said.strip() or "(ssh said nothing)"
    if "Host key verification failed" in said or "HOST IDENTIFICATION HAS CHANGED" in said:
        hint = (f"the host key of {target} (or of a jump host) is not in your known_hosts or "
                "has changed. Nothing was done on the cluster. Check the key with your site, "
                f"then log in once by hand ('ssh {target}') to record it; hpcfutures never "
                "accepts an unknown key by itself")
    elif "Permission denied" in said:
        hint = (f"the login to {target} was refused (key, password or second factor). Nothing "
                f"was done on the cluster. Check that 'ssh {target}' works in a terminal")
    else:
        hint = f"check that 'ssh {target}' works in a terminal. Nothing was done on the cluster"
    return f"ssh {target} failed (status {status}): {hint}. ssh said: {said}"


def lost_message(target: str, what: str, said: str) -> str:
    return (f"could not {what}: the SSH connection to {target} is gone or broken "
            f"({said.strip() or 'ssh exited with status 255'})")


def _await_exit(pid: int, seconds: float) -> None:
    """Wait (at most ``seconds``) until the master has gone: its session's end is
    asynchronous after ``-O exit``, and a caller may count processes right after."""
    backoff = Backoff(first=0.01, cap=0.2)
    deadline = time.monotonic() + seconds
    while os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else _alive(pid):
        if time.monotonic() >= deadline:
            return
        backoff.sleep(deadline)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _read(path: str) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as handle:
        return handle.read()
    return ""


def _short_tmp() -> str | None:
    """/tmp where it exists: a control socket's path must stay short (about 104
    bytes), which macOS's long $TMPDIR can break."""
    return "/tmp" if os.path.isdir("/tmp") else None
