"""Passwords and second factors for a master opened where there is no terminal (a notebook).

ssh asks on the terminal when there is one.  A Jupyter kernel has none, so
the master is started with ``SSH_ASKPASS`` (OpenSSH 8.4 or later, with
``SSH_ASKPASS_REQUIRE=force``) naming a small program of ours.  ssh runs it
once per prompt; it hands the prompt over a Unix socket in the master's
private folder (0700) to this process, which asks the user with
:func:`getpass.getpass` (Jupyter shows an input box), and hands the answer back.
Nothing is stored: each answer goes once from the user to ssh.

::

    notebook process                 ssh -M (no terminal)         askpass helper (per prompt)
    login(): accept  <── socket ──── runs $SSH_ASKPASS "Password:" ─ sends the prompt, prints
    getpass(prompt)  ── answer ────> reads it from the helper          the answer for ssh
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import subprocess
import sys
import time

__all__ = ["has_terminal", "login"]

#: The helper ssh runs: the prompt to the socket, the answer to stdout.
_HELPER = """#!{python}
import socket, sys
with socket.socket(socket.AF_UNIX) as s:
    s.connect({socket_path!r})
    s.sendall((sys.argv[1] if len(sys.argv) > 1 else "Password:").encode() + b"\\0")
    answer = b""
    while True:
        part = s.recv(4096)
        if not part:
            break
        answer += part
if not answer.startswith(b"ok\\0"):
    sys.exit(1)
sys.stdout.write(answer[3:].decode())
sys.stdout.write("\\n")
"""


def has_terminal() -> bool:
    """Whether ssh can ask on a terminal (this process has a controlling one)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def login(argv: list[str], folder: str, target: str, timeout: float) -> tuple[int, int]:
    """Run the master's ``argv`` with its prompts answered from this thread (Jupyter
    answers ``getpass`` in the thread that runs the cell); (its exit status, how many
    prompts there were).  Raises TimeoutError after ``timeout`` s."""
    socket_path = os.path.join(folder, "askpass.sock")
    helper = os.path.join(folder, "askpass")
    with open(helper, "w") as handle:
        handle.write(_HELPER.format(python=sys.executable, socket_path=socket_path))
    os.chmod(helper, 0o700)
    environment = {**os.environ, "SSH_ASKPASS": helper, "SSH_ASKPASS_REQUIRE": "force",
                   "DISPLAY": os.environ.get("DISPLAY", ":0")}
    asked = 0
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(socket_path)
        os.chmod(socket_path, 0o600)
        server.listen(1)
        server.settimeout(0.2)
        process = subprocess.Popen(argv, env=environment, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no login within {timeout:g} s")
                try:
                    connection, _ = server.accept()
                except TimeoutError:  # socket.timeout is TimeoutError
                    continue
                with connection:
                    connection.settimeout(None)
                    asked += _answer(connection, target)
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            for path in (socket_path, helper):
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return process.returncode, asked


def _answer(connection: socket.socket, target: str) -> int:
    prompt = b""
    while not prompt.endswith(b"\0"):
        part = connection.recv(4096)
        if not part:
            return 0
        prompt += part
    text = prompt[:-1].decode(errors="replace").strip()
    try:
        answer = getpass.getpass(f"ssh {target}: {text} ")
    except EOFError:
        connection.sendall(b"no\0")
        return 1
    connection.sendall(b"ok\0" + answer.encode())
    return 1
