"""``hpcfutures run``: a local launcher that behaves like ``srun -n N``.

It starts N copies of a command, each told its rank, the world size and a
launch id through ``HPCFUTURES_RANK``, ``HPCFUTURES_SIZE`` and
``HPCFUTURES_LAUNCH_ID``; prints every line they write tagged ``[rank N role]``
(relay.py); forwards SIGINT/SIGTERM to every copy; and once the client copy
has exited gives the others a grace period before ending them.
Its exit status is the client's, or the first failure of another copy (not a
worker that a call killed: the client was told, and its status says what it
made of that); when a launch fails, one line names the copy that failed first
on its own (the client, when the client failed and the others only followed
its verdict) and where its log is.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import gc
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .._support.config import resolve_option
from .._support.limits import OpenFiles, raise_open_files_limit
from .._support.patience import Patience
from ..launchers._identity import client_rank, minimum_size
from ..launchers.run import (
    LAUNCH_ID_VAR,
    RANK_VAR,
    SIZE_VAR,
    TAGGED_VAR,
    TERMINAL_VAR,
)
from .relay import Relay
from .verdict import (
    NO_CLIENT,
    death_note,
    death_notes_folder,
    failed_first,
    failure_pointer,
    killed_by_a_call,
    launch_status,
    role_of,
)

__all__ = ["run", "serves"]

#: Seconds between SIGTERM and SIGKILL for a copy that ignores SIGTERM.
KILL_AFTER = 5.0


def _die_with_parent(open_files: tuple[int, int] | None = None) -> None:  # pragma: no cover
    """In the child: ask Linux to send it SIGTERM if ``hpcfutures run`` dies; give it
    back the open-files limits (soft, hard) the user started us with (see :func:`run`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if open_files is not None:  # no import here: another thread may hold its lock
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, open_files)
    os.setpgrp()  # Ctrl-C reaches the copies once, through us


def _client_rank(size: int, environ: Mapping[str, str]) -> int:
    colocated = resolve_option("scheduler_in_client", environ)
    if size < minimum_size(False):
        colocated = True
    return client_rank(colocated)


def run(size: int, command: Sequence[str], *, grace: float | None = None,
        environ: Mapping[str, str] | None = None) -> int:
    """Run ``size`` copies of ``command``; return the launch's exit status.

    ``grace``: seconds the other copies may outlive the client; by default it
    grows with the launch (:attr:`Patience.grace`): the scheduler tells every
    rank that the launch ended, one at a time.
    """
    if size < 1:
        raise ValueError("the number of copies (-n) must be at least 1")
    if not command:
        raise ValueError("no command given to run")
    environ = dict(os.environ if environ is None else environ)
    if grace is None:
        grace = Patience.for_launch(size, resolve_option("timeout", environ)).grace
    # We hold two pipes per copy (and a pidfd): at 150 copies, more than a soft
    # limit of 256 allows.  The copies get the limit we were given, as under srun
    # (the user's soft limit): each rank raises its own as far as its role needs,
    # and a program that is not ours keeps the limit it was started with (a soft
    # limit above 1024 breaks code that uses select()).
    open_files = raise_open_files_limit()
    in_the_copy = functools.partial(_die_with_parent, _given_back(open_files))
    # This process ends with the launch and runs none of the user's code: at exit,
    # spare its interpreter's last collections the 60,000 objects Dask's import left
    # (about 0.1 s of every launch's end).  Never in the client: see benchmarks/README.md.
    atexit.register(gc.freeze)
    launch_id = secrets.token_hex(6)
    # Before any copy starts: this may read Dask's configuration, which takes
    # long enough for a signal to arrive before the supervisor could forward it.
    serving = serves(command)
    # The rank whose end ends the launch, and whose status is the launch's: the
    # client; a serving launch has none, and its scheduler ends it when stopped.
    client = 0 if serving else _client_rank(size, environ)
    processes: list[subprocess.Popen[bytes]] = []
    relay = Relay([role_of(rank, size, NO_CLIENT if serving else client)
                   for rank in range(size)])
    shared = {**environ, TAGGED_VAR: "1", **_terminal_vars(environ)}

    def start_copies() -> int | None:
        """Start every copy; 127 (and none left running) if one cannot start."""
        for rank in range(size):
            env = {**shared, RANK_VAR: str(rank), SIZE_VAR: str(size),
                   LAUNCH_ID_VAR: launch_id}
            try:
                processes.append(subprocess.Popen(list(command), env=env,
                                                  stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE,
                                                  preexec_fn=in_the_copy))
            except OSError as err:
                for process in processes:
                    process.kill()
                print(f"hpcfutures run: cannot start {command[0]!r}: {err}", file=sys.stderr)
                return 127
            relay.follow(rank, processes[-1].stdout, processes[-1].stderr)
        return None

    notes = death_notes_folder(launch_id)
    try:
        status, first = _supervise(processes, start_copies, client, grace, notes,
                                   relay.still_starting, relay.role(client))
        relay.drain()
        if first is not None:
            print(failure_pointer(first, processes[first].returncode, size, client, launch_id,
                                   environ, relay.role(first), launch_failed=status != 0,
                                   serving=serving)
                  + death_note(notes, first),
                  file=sys.stderr, flush=True)
    finally:
        if notes is not None:
            shutil.rmtree(notes, ignore_errors=True)
    return status


def serves(command: Sequence[str]) -> bool:
    """Whether ``command`` runs ``hpcfutures serve`` (``hpcfutures serve ...``, or
    ``python -m hpcfutures serve ...``): a serving launch, whose rank 1 is a worker."""
    args = list(command)
    if len(args) >= 2 and os.path.basename(args[0]) == "hpcfutures":
        return args[1] == "serve"
    if "-m" in args[1:]:
        at = args.index("-m", 1)
        return args[at + 1:at + 3] == ["hpcfutures", "serve"]
    return False


def _given_back(open_files: OpenFiles | None) -> tuple[int, int] | None:
    """The open-files limits to give the copies back, if we raised ours."""
    if open_files is None or not open_files.raised:
        return None
    hard = resource.RLIM_INFINITY if open_files.hard is None else open_files.hard
    return open_files.was, hard


def _terminal_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """Where our output is a terminal, the copies' is one too, as far as they can tell:
    their Python writes each line at once (not in blocks), and a progress bar draws."""
    extra = {}
    with contextlib.suppress(AttributeError, ValueError):
        if sys.stdout.isatty() and "PYTHONUNBUFFERED" not in environ:
            extra["PYTHONUNBUFFERED"] = "1"
        if sys.stderr.isatty():
            extra[TERMINAL_VAR] = "1"
    return extra


def _supervise(processes: list[subprocess.Popen[bytes]], start_copies: Callable[[], int | None],
               client: int, grace: float, notes: str | None = None,
               still_starting: Callable[[int], bool] = lambda rank: False,
               lead: str = "client") -> tuple[int, int | None]:
    """Start the copies and wait for them, forwarding SIGINT/SIGTERM from before the
    first one starts (a copy that ignores the signal must not outlive us); return the
    launch's status, and the rank that failed first (None: none did on its own).
    ``client``: the rank whose end ends the launch (``lead`` names its role)."""
    signalled: list[float] = []
    changed = threading.Event()

    def forward(signum: int, frame: object) -> None:
        signalled.append(time.monotonic())
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)
        changed.set()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed = start_copies()
        if failed is not None:
            return failed, None
        return _wait_all(processes, client, grace, signalled, changed, notes, still_starting,
                         lead)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Exits:
    """The copies' ends, in the order they came, each noticed on its own: O(1) per exit.

    On Linux one thread waits for all of them on their pidfds (an epoll set): a
    copy's pidfd turns readable when it ends, and only that copy is reaped.
    (Waiting with ``os.waitpid(-1)`` would also reap children that are not ours
    when :func:`run` is called in-process; ``Popen.poll`` over every copy on each
    exit would make a launch O(N²).)  Where there are no pidfds (macOS, Linux < 5.3, or
    no descriptor left), a copy gets a thread that waits for it alone.
    """

    def __init__(self, processes: Sequence[subprocess.Popen], changed: threading.Event) -> None:
        self.order: list[int] = []  # ranks in the order they ended
        self._ended: set[int] = set()
        self._processes, self._changed = processes, changed
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        for rank, process in enumerate(processes):
            pidfd = _pidfd(process)
            if pidfd is None:
                threading.Thread(target=self._reap, args=(rank,), daemon=True,
                                 name=f"hpcfutures-run-reap-{rank}").start()
            else:
                self._selector.register(pidfd, selectors.EVENT_READ, rank)
        if self._selector.get_map():
            threading.Thread(target=self._wait_on_pidfds, daemon=True,
                             name="hpcfutures-run-reaper").start()
        else:
            self._selector.close()

    def __len__(self) -> int:
        return len(self._ended)

    def __contains__(self, rank: object) -> bool:
        return rank in self._ended

    def _wait_on_pidfds(self) -> None:
        try:
            while self._selector.get_map():
                for key, _ in self._selector.select():
                    self._selector.unregister(key.fd)
                    os.close(key.fd)
                    self._reap(key.data)
        finally:
            self._selector.close()

    def _reap(self, rank: int) -> None:
        self._processes[rank].wait()  # it has ended (pidfd): no wait
        with self._lock:
            if rank not in self._ended:
                self._ended.add(rank)
                self.order.append(rank)
        self._changed.set()


def _pidfd(process: subprocess.Popen) -> int | None:
    """A pidfd for ``process`` (readable once it ends), or None where there is none."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfds here; no descriptor left
        return None
    if process.returncode is not None:
        # Reaped already (``forward`` polls every copy on a signal): the pid may
        # be another process's by now.  The caller's thread for it ends at once.
        os.close(pidfd)
        return None
    return pidfd


def _wait_all(processes: list[subprocess.Popen], client: int, grace: float,
              signalled: list[float], changed: threading.Event,
              notes: str | None = None,
              still_starting: Callable[[int], bool] = lambda rank: False,
              lead: str = "client") -> tuple[int, int | None]:
    """Wait for every copy; after the client ends (or a forwarded signal),
    give the others ``grace`` seconds, then SIGTERM, then SIGKILL.

    A worker copy ended that way after the client finished, but that had not
    joined the scheduler yet (``still_starting``: on an oversubscribed node,
    still importing Python when a short launch ended), missed nothing and fails
    nothing: the launch's status stays the client's.
    """
    exits = _Exits(processes, changed)
    ended_by_us: set[int] = set()
    never_joined: set[int] = set()
    grace_ends = kill_at = None
    killed = False
    while True:
        changed.clear()
        if len(exits) == len(processes):
            break
        now = time.monotonic()
        if grace_ends is None and client in exits:
            grace_ends = now + grace
        if signalled and (grace_ends is None or grace_ends > signalled[0] + grace):
            grace_ends = signalled[0] + grace  # a copy that ignores the signal must not hang us
        if grace_ends is not None and kill_at is None and now >= grace_ends:
            stragglers = [rank for rank in range(len(processes)) if rank not in exits]
            why = "the signal" if signalled else f"the {lead} finished"
            if not signalled:
                never_joined.update(rank for rank in stragglers if still_starting(rank))
            print(f"hpcfutures run: rank(s) {stragglers} still running {grace:g} s after "
                  f"{why}{_of_which_starting(stragglers, never_joined)}; terminating them",
                  file=sys.stderr)
            for rank in stragglers:
                processes[rank].terminate()
            ended_by_us.update(stragglers)
            kill_at = now + KILL_AFTER
        elif kill_at is not None and not killed and now >= kill_at:
            for rank, process in enumerate(processes):
                if rank not in exits:
                    process.kill()
            killed = True  # SIGKILL cannot be ignored: once is enough
        next_deadline = None if killed else kill_at or grace_ends
        changed.wait(None if next_deadline is None else max(0.0, next_deadline - now))
    exit_codes = [process.wait() for process in processes]  # all have ended: no wait
    excused = killed_by_a_call(notes, len(processes))
    status = launch_status(exit_codes, client, excused | never_joined)
    # A failure the user caused (Ctrl-C, scancel) or that we caused (ending
    # stragglers) needs no pointer; the first copy that failed on its own does,
    # and so does, in a launch that ended well, a worker that a call killed.
    if signalled:
        first = None
    elif status == 0:
        first = next((rank for rank in exits.order if rank in excused), None)
    else:
        first = failed_first(exits.order, exit_codes, client, ended_by_us)
    return status, first


def _of_which_starting(stragglers: list[int], never_joined: set[int]) -> str:
    starting = [rank for rank in stragglers if rank in never_joined]
    if not starting:
        return ""
    if len(starting) == len(stragglers):
        return " (workers still starting: they had not joined the scheduler, so nothing is lost)"
    return (f" ({starting} are workers still starting: they had not joined the scheduler, "
            "so nothing is lost)")
