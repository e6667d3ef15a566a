"""A worker's watcher: learns how and running what the worker died, and tells the scheduler.

Started by :func:`.deathwatch.start_watcher` as ``python .../watcher.py``, so
that until the worker dies it has imported nothing but the standard library
(a few MB per rank, no start-up cost worth the name).  Its standard input is a
pipe whose write end only the worker holds: first a line of JSON (where to
report, the worker's Dask address and pid, the slot's descriptor), then
nothing until the worker's last words, if any (see :mod:`.deathwatch`), and
EOF when the worker's process is gone.  It then reads the slot, writes what
it learnt into the worker's output (the rank's log), and, unless the worker
left on purpose, sends the scheduler a death certificate
(:func:`hpcfutures._dask.deaths.report_death`).

Under ``mpiexec`` (MPICH's Hydra) a rank whose PMI connection closes before it
finalized makes Hydra kill every rank: one crashing call would end the whole
launch.  The watcher is handed the worker's PMI descriptor (``keep_fds``), so
the connection outlives a crashed worker; the watcher closes it only after
reporting, once the launch has ended or a while later (see :func:`_linger`).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import signal
import stat
import struct
import sys
import tempfile
from typing import Any

#: Bytes of last words kept (faulthandler's report of many threads can be long).
MAX_WORDS = 256 * 1024
#: Seconds the watcher spends telling the scheduler, unless the worker says how long
#: (a large launch's: ``Patience.report_timeout``).
REPORT_TIMEOUT = 5.0

#: Threads of a worker that get a row in the slot; more run unrecorded.
SLOTS = 64
#: Bytes per row: running (0/1), index, thread ident, length of the text; then
#: the text, JSON ``[key, function]``.
SLOT_SIZE = 512
HEAD = struct.Struct("<IIQH")
#: What the wrapped ``os._exit`` writes into the pipe: the status and the thread.
EXIT_WORD = b"\0hpcfutures-exit "
#: What a worker that leaves on purpose writes: nothing to report.
GOODBYE_WORD = b"\0hpcfutures-goodbye\n"

#: faulthandler's names for the fatal signals it reports.
FATAL_SIGNALS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}


def last_words(words: bytes) -> dict[str, Any]:
    """What the dying worker said: ``how`` ("exit", "signal", "goodbye", "killed"),
    ``status`` or ``signal``, the ``thread`` that did it, and faulthandler's ``report``."""
    if GOODBYE_WORD in words:
        return {"how": "goodbye"}
    found: dict[str, Any] = {"how": "killed", "status": None, "signal": None, "thread": None,
                             "report": ""}
    text = words.replace(b"\0", b"").decode(errors="replace")
    fatal = re.search(r"Fatal Python error: ([^\n]+)", text)
    if fatal is not None:
        name = fatal.group(1).strip()
        found.update(how="signal", signal=FATAL_SIGNALS.get(name, name),
                     report=text[fatal.start():].strip())
        thread = re.search(r"Current thread 0x([0-9a-f]+)", text)
        if thread is not None:
            found["thread"] = int(thread.group(1), 16)
        return found
    at = words.rfind(EXIT_WORD)
    if at >= 0:
        line = words[at + len(EXIT_WORD):].split(b"\n", 1)[0].split()
        try:
            found.update(how="exit", status=int(line[0]), thread=int(line[1]))
        except (IndexError, ValueError):
            pass
    return found


def certificate(config: dict[str, Any], words: dict[str, Any],
                running: list[dict[str, Any]]) -> dict[str, Any]:
    """The death certificate: who died, how, and which call (if any) did it.

    The culprit is the call running on the thread that exited or faulted; a
    worker killed from outside (no last words) blames nobody, and its calls
    run again elsewhere.
    """
    culprit = None
    if words["how"] in ("exit", "signal"):
        on_thread = [call for call in running if call["thread"] == words["thread"]]
        if on_thread:
            culprit = on_thread[0]
        elif len(running) == 1 and words["how"] == "signal":
            culprit = running[0]  # faulthandler named no thread we know: the only call
    return {"worker": config.get("worker"), "who": config.get("who"), "pid": config.get("pid"),
            "how": words["how"], "status": words.get("status"), "signal": words.get("signal"),
            "report": words.get("report", ""), "running": running, "culprit": culprit}


def describe(cert: dict[str, Any]) -> str:
    """One line for the worker's log: who died, how, running what."""
    how = (f"exited with status {cert['status']}" if cert["how"] == "exit" else
           f"was killed by {cert['signal']}" if cert["how"] == "signal" else
           "was killed from outside (SIGKILL, the OOM killer?)")
    culprit = cert.get("culprit")
    doing = (f" running {culprit['function']} (call {culprit['index']} of task "
             f"{culprit['key']})" if culprit else
             f" while {len(cert['running'])} call(s) ran; they run again elsewhere"
             if cert["running"] else "")
    return f"hpcfutures: {cert['who']} {how}{doing}"


def death_notes(launch_id: str) -> str:
    """The private folder where ``hpcfutures run``'s copies leave a note on how a
    worker died, for the line that names the copy that failed first."""
    return os.path.join(tempfile.gettempdir(), f"hpcfutures-{os.getuid()}",
                        f"{launch_id}-deaths")


def _leave_note(cert: dict[str, Any]) -> None:
    """Under ``hpcfutures run``: tell it what this worker died of (one line, by rank),
    and whether a call killed it (the client was told, and decides the launch's status)."""
    launch_id, rank = os.environ.get("HPCFUTURES_LAUNCH_ID"), os.environ.get("HPCFUTURES_RANK")
    if not launch_id or not rank or not rank.isdigit():
        return
    folder = death_notes(launch_id)
    try:
        info = os.stat(folder)
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            return  # not the folder run made for us
        with open(os.path.join(folder, rank), "w") as note:
            json.dump({"text": describe(cert).removeprefix("hpcfutures: "),
                       "by_a_call": cert["culprit"] is not None}, note)
    except OSError:
        pass


def _read_all(fd: int) -> tuple[dict[str, Any], bytes]:
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    head, _, words = data.partition(b"\n")
    config = json.loads(head.decode()) if head else {}
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        words = (words + chunk)[-MAX_WORDS:]
    return config, words


def read_slot(memory: Any) -> list[dict[str, Any]]:
    """The calls running when the worker died: ``[{key, index, function, thread}]``."""
    found = []
    for offset in range(0, min(len(memory), SLOTS * SLOT_SIZE), SLOT_SIZE):
        busy, index, thread, length = HEAD.unpack_from(memory, offset)
        if not busy or not length:
            continue
        start = offset + HEAD.size
        try:
            key, function = json.loads(bytes(memory[start:start + length]).decode())
        except (ValueError, UnicodeDecodeError):
            continue
        found.append({"key": key, "index": index, "function": function, "thread": thread})
    return found


def _running_calls(config: dict[str, Any]) -> list[dict[str, Any]]:
    fd = config.get("slot_fd")
    if fd is None:
        return []
    try:
        with mmap.mmap(fd, SLOTS * SLOT_SIZE, access=mmap.ACCESS_READ) as memory:
            return read_slot(memory)
    except (OSError, ValueError):
        return []


def _report(config: dict[str, Any], cert: dict[str, Any]) -> None:
    """Import Dask (only now) and hand the scheduler the certificate."""
    import asyncio

    from hpcfutures._dask.deaths import report_death

    try:
        asyncio.run(report_death(config["address"], cert,
                                 float(config.get("report_timeout") or REPORT_TIMEOUT),
                                 config.get("credentials")))
    except Exception:  # the scheduler is gone too: the launch is over
        pass


def main() -> None:
    # Ctrl-C is for the worker to handle.  The watcher starts with SIGINT blocked
    # (children_start_deaf_to_ctrl_c): ignoring it drops one that came during
    # start-up, then it can be unblocked.  (No hpcfutures import yet: see below.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.path and os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0]):
        sys.path.pop(0)  # this folder's modules must not shadow anyone's
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    config, words = _read_all(0)
    said = last_words(words)
    if not config or said["how"] == "goodbye":
        return
    cert = certificate(config, said, _running_calls(config))
    launcher_fds = [int(fd) for fd in config.get("keep_fds", ())]
    if cert["culprit"] is None:
        _close(launcher_fds)  # killed from outside: the launcher's own rules apply
    print(describe(cert), file=sys.stderr, flush=True)
    if cert["report"]:
        print(cert["report"], file=sys.stderr, flush=True)
    _leave_note(cert)
    _let_go_of_output()
    sys.path[:] = config.get("sys_path") or sys.path
    _report(config, cert)
    if cert["culprit"] is not None:
        _finalize_pmi(launcher_fds)


def _let_go_of_output() -> None:
    """Close the worker's output, inherited: its reader (``hpcfutures run``, srun)
    must not wait for this process to report before it sees the worker's end."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    except OSError:
        pass


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def _finalize_pmi(fds: list[int], timeout: float = 2.0) -> None:
    """Tell MPICH's process manager that the crashed rank is done (PMI "finalize").

    Hydra ends every rank of the job when a rank's PMI connection closes before
    it finalized; a call that crashed one worker rank must not take the whole
    launch with it.  The rank's other ranks never talk MPI to it again (workers
    use MPI only to find the scheduler), and the launch's end knows it is gone
    (see ``client_side._launch_status``).
    """
    import select

    for fd in fds:
        try:
            os.write(fd, b"cmd=finalize\n")
            ready, _, _ = select.select([fd], [], [], timeout)
            if ready:
                os.read(fd, 4096)
        except OSError:
            pass
    _close(fds)


if __name__ == "__main__":
    main()
