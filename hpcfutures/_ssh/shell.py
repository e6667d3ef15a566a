"""The commands hpcfutures sends through SSH, built as text: no process runs here.

Whatever the remote account's login shell is (bash, zsh, tcsh, fish), it
only ever sees the two words ``/bin/sh -s``: every command is a POSIX ``sh``
script sent on stdin, where :func:`shlex.quote` is the right quoting.  A
login shell never parses a path, a job script or a user's ``setup`` line.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterable, Sequence

__all__ = [
    "REMOTE_SHELL",
    "file_reader",
    "file_writer",
    "master_command",
    "mux_command",
    "parse_config",
    "parse_private",
    "remote_path",
    "script",
    "split_address",
    "split_remote",
    "validate_target",
]

#: The remote command of every session: what the login shell runs (``shell -c``).
REMOTE_SHELL = ("/bin/sh", "-s")

#: A remote path prefix, scp-style: ``host:path`` (no slash before the colon).
_REMOTE = re.compile(r"^(?P<host>[^/:\s][^/:\s]*):(?P<path>.*)$")


def validate_target(target: str) -> str:
    """``target`` as ``ssh`` takes it (an alias of ``~/.ssh/config``, ``user@host``), or
    a ValueError: never an option (``-oProxyCommand=...``), never blank."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"ssh target must be a host name or ~/.ssh/config alias, got {target!r}")
    if target.startswith("-") or any(c.isspace() for c in target):
        raise ValueError(f"ssh target {target!r} is not a host: it may not start with '-' "
                         "or contain spaces")
    return target


def split_remote(location: str) -> tuple[str, str] | None:
    """``("cluster", "~/f.json")`` for ``"cluster:~/f.json"``; None for a local path.

    As scp reads it: a colon before any slash.  ``./a:b`` or ``/x/a:b`` stay local.
    """
    match = _REMOTE.match(location)
    if match is None or (len(match["host"]) == 1 and re.match(r"^[A-Za-z]:[\\/]", location)):
        return None  # C:\ on Windows
    return match["host"], match["path"] or "."


def split_address(address: str) -> tuple[str, str, int]:
    """``("tls", "10.0.0.5", 8786)`` for ``"tls://10.0.0.5:8786"`` (IPv6 in brackets)."""
    scheme, sep, rest = address.partition("://")
    match = re.fullmatch(r"\[(?P<v6>[^\]]+)\]:(?P<p6>\d+)|(?P<host>[^:\[\]]+):(?P<port>\d+)",
                         rest)
    if not sep or match is None:
        raise ValueError(f"not a scheme://host:port address: {address!r}")
    host = match["v6"] or match["host"]
    return scheme, host, int(match["p6"] or match["port"])


def remote_path(path: str, home: str) -> str:
    """``path`` on the cluster, absolute: ``~`` is the remote account's home.

    Nothing else is expanded (no ``$VAR``): the path travels quoted.
    """
    if path == "~":
        return home
    if path.startswith("~/"):
        return f"{home.rstrip('/')}/{path[2:]}"
    if path.startswith("~"):
        raise ValueError(f"remote path {path!r}: only ~ (your own home) is understood, "
                         "not ~user")
    if not path.startswith("/"):
        return f"{home.rstrip('/')}/{path}"  # as scp: relative to the home
    return path


def script(body: Iterable[str], setup: str | None = None) -> str:
    """The whole ``sh`` script of one session: the login environment (only when
    ``setup`` is given: ``module`` needs /etc/profile), the setup, then ``body``."""
    lines: list[str] = []
    if setup:
        lines += [". /etc/profile >/dev/null 2>&1 || :", setup]
    lines += list(body)
    return "\n".join(lines) + "\n"


def mux_command(target: str, control: str | None, *, connect_timeout: float,
                options: Sequence[str] = (), remote: Sequence[str] = REMOTE_SHELL,
                extra: Sequence[str] = ()) -> list[str]:
    """An ``ssh`` command that runs through the control master at ``control``.

    ``BatchMode=yes``: it never prompts (only the master may).  ``ControlMaster=no``:
    it never becomes a master.  ``ProxyCommand=false``: when the master has
    gone it fails at once instead of logging in again on its own (a command must
    never open a second, unannounced connection, nor ask for a second factor).
    """
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ControlMaster=no",
            "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o", "ProxyCommand=false"]
    if control is not None:
        argv += ["-o", f"ControlPath={control}"]
    for option in options:
        argv += ["-o", option]
    return [*argv, *extra, validate_target(target), *remote]


def master_command(target: str, control: str, log: str, *, connect_timeout: float,
                   options: Sequence[str] = ()) -> list[str]:
    """The ``ssh`` that opens the control master: the one step that may prompt (a
    password, a second factor), in the terminal or through SSH_ASKPASS.  ``-f``
    returns once logged in; its messages go to ``log`` (a pipe would be held open
    by the master in the background)."""
    argv = ["ssh", "-M", "-N", "-f", "-o", f"ControlPath={control}",
            "-o", "ControlPersist=no", "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-E", log]
    for option in options:
        argv += ["-o", option]
    return [*argv, validate_target(target)]


def parse_config(text: str) -> dict[str, str]:
    """``ssh -G``'s output as a dict, keys in lower case (repeated keys: the first)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            config.setdefault(key.lower(), value.strip())
    return config


def file_writer(path: str, text: str, mode: int = 0o600) -> list[str]:
    """``sh`` lines that write ``text`` to ``path`` (folders made 0700), with ``mode``."""
    end = f"HPCFUTURES_EOF_{secrets.token_hex(8)}"
    if end in text:  # pragma: no cover - 64 random bits
        raise ValueError("the file's text contains the here-document's end marker")
    quoted = shlex.quote(path)
    folder = shlex.quote(path.rsplit("/", 1)[0] or "/")
    return [f"umask 077 && mkdir -p {folder} || exit 3",
            f"cat > {quoted} <<'{end}' || exit 3", text.rstrip("\n"), end,
            f"chmod {mode:o} {quoted}"]


def file_reader(path: str) -> list[str]:
    """``sh`` lines that print a private file, after its owner and mode as the
    remote system sees them on the open file (GNU or BSD stat): the answer for
    :func:`parse_private`."""
    quoted = shlex.quote(path)
    return [f"if [ ! -e {quoted} ]; then echo 'hpcf absent'; exit 0; fi",
            f"if [ ! -r {quoted} ]; then echo 'hpcf unreadable'; exit 0; fi",
            f"exec 3< {quoted}",
            "st=$(stat -L -c '%u %a' /dev/fd/3 2>/dev/null || stat -L -f '%u %Lp' /dev/fd/3)",
            'echo "hpcf file $(id -u) $st"', "cat <&3"]


def parse_private(output: str, path: str) -> tuple[str, str]:
    """What :func:`file_reader` printed: ("absent" | "unreadable" | "ok" | why not, text).

    A file that another user owns, or that others could read, is refused as the
    local reader refuses it (the file carries the launch's credentials).
    """
    head, _, text = output.partition("\n")
    words = head.split()
    if not words:  # removed between the test and the open: the shell said nothing
        return "absent", ""
    if words[:2] == ["hpcf", "absent"]:
        return "absent", ""
    if words[:2] == ["hpcf", "unreadable"]:
        return "unreadable", ""
    if len(words) != 5 or words[:2] != ["hpcf", "file"]:
        return f"the cluster answered {head!r} instead of the file's owner and mode", ""
    me, owner, mode = words[2], words[3], int(words[4], 8)
    if owner != me:
        return (f"it is owned by uid {owner}, not by you (uid {me}); another user's "
                "scheduler must never run your tasks"), ""
    if mode & 0o077:
        return (f"its mode is {mode:o}, so other users could read the scheduler's "
                "credentials; hpcfutures writes it 0600: remove it (or chmod 600 it) and "
                "start again"), ""
    return "ok", text

