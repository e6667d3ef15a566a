"""Logging defaults: Dask's chatter stays out of the user's way.

Dask logs every start, stop and closed connection at INFO, and reports every
failed task (and every object it cannot pickle) at ERROR even though the
client re-raises that very error on the task's future.  hpcfutures shows Dask's
warnings and errors only, without those duplicate reports;
``HPCFUTURES_DASK_LOG_LEVEL=INFO`` brings everything back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Iterator

__all__ = [
    "configure_rank_logging", "dask_silenced", "quiet_dask_logging", "quiet_for_shutdown",
    "rank_log_path", "shutting_down", "where_to_read",
]

#: The variable naming the directory of per-rank log files.
LOG_DIR_VAR = "HPCFUTURES_LOG_DIR"

_DASK_LOGGERS = ("distributed", "tornado")

#: (logger, pattern of the message's start) of reports that duplicate an error the
#: user gets anyway, or that only say that the launch is being stopped (Ctrl-C,
#: SIGTERM, scancel, the time limit: the client says what happened): a worker
#: closing while it runs tasks, a peer that hung up in the middle of a TLS handshake.
#: A lost worker, too: the client names it and says that its tasks run again, and
#: the worker says in one line that it lost the scheduler (not a traceback).
#: A client that went away (Ctrl-C, an exception) while the scheduler was writing
#: to it: the scheduler removes it a moment later, and the client's own process
#: reports why it ended (Dask logs only client comms with this message).
_DUPLICATES = {
    # "failed during get data": a worker that lost its node's network cannot send a
    # result it holds; whoever asked hears of it and the scheduler recomputes it.
    "distributed.worker": re.compile(
        "Compute Failed|Failed to communicate with scheduler during heartbeat"
        "|failed during get data with "),
    "distributed.scheduler": re.compile(
        r"Removing worker .* caused the cluster to lose already computed task"
        r"|Workers .* do not use a nanny and will be terminated without restarting"
        r"|Closed comm .* while trying to write", re.S),
    "distributed.protocol.pickle": re.compile("Failed to serialize"),
    "distributed.worker.state_machine": re.compile(
        r"Async instruction for .* ended with CancelledError$", re.S),
    # A gather still waiting when the client closes (the launch was stopped): Dask
    # leaves its inner task's AllExit unretrieved, and asyncio reports it at exit.
    "asyncio": re.compile(
        r"Task exception was never retrieved\nfuture: <Task finished .*Client\._gather\b"
        r".*exception=AllExit\(\)>", re.S),
    # The peer hung up before its handshake was done: a knock (a bare TCP connect,
    # then close) or a join that had given up waiting for a scheduler busy with
    # thousands of others (many such lines in a large launch); the peer tries again.
    "distributed.comm.tcp": re.compile(
        r"Listener on .*: TLS handshake failed with remote .*"
        r"(UNEXPECTED_EOF_WHILE_READING|EOF occurred in violation of protocol"
        r"|Connection reset by peer)", re.S),
}


class _DropDuplicateReport(logging.Filter):
    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


class _DropTornadoCancelledHandshake(logging.Filter):
    """Tornado before 6.6 raises out of its own close when a TLS connect was given up.

    A connect that timed out (say, a worker calling a scheduler on a node whose link
    is down) cancels the stream's handshake future; when the peer's reply arrives
    later, tornado's ``IOStream._signal_closed`` calls ``exception()`` on that
    cancelled future, and asyncio prints a traceback of the ``CancelledError``.
    Nothing was lost: the connect had already failed and been retried or reported.
    Tornado 6.6 catches the error itself; this filter does the same for older ones.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None or record.exc_info[0] is not asyncio.CancelledError:
            return True
        frame = record.exc_info[2]
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        if frame is None:
            return True
        code = frame.tb_frame.f_code
        in_tornado_close = (code.co_name == "_signal_closed"
                            and code.co_filename.replace("\\", "/").endswith(
                                "tornado/iostream.py"))
        return not in_tornado_close


class _DropAbandonedHandshake(logging.Filter):
    """A connection whose peer gave up before the TLS handshake, accepted late.

    A probe or knock that times out closes its connection; a scheduler busy with
    a large launch's joins accepts it later, and its TLS handshake then fails.
    Dask logs that at WARNING (dropped above); two other paths print a whole
    traceback: tornado's accept handler (``Closed before TLS handshake``,
    ``ENOTCONN``), and Dask's handshake-failure path once the listener has
    stopped (``invalid operation on non-started TCPListener``, at the end of a
    launch).  Nothing was lost: the peer had already given up, and asked again.
    """

    REASONS = ("Closed before TLS handshake", "invalid operation on non-started TCPListener",
               "Transport endpoint is not connected")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None or record.exc_info[1] is None:
            return True
        error: BaseException | None = record.exc_info[1]
        while error is not None:
            if isinstance(error, (OSError, ValueError)) and any(
                    reason in str(error) for reason in self.REASONS):
                return False
            error = error.__context__
        return True


def quiet_dask_logging(environ=os.environ) -> None:
    """Apply hpcfutures' default level to Dask's loggers (idempotent).

    A process whose earlier launch ended silenced (:func:`quiet_for_shutdown`)
    gets Dask's own levels back first: a second executor opened after a first
    one was stopped by Ctrl-C hears Dask's errors again."""
    global _shutting_down
    for name, own in _dask_own_levels().items():
        logging.getLogger(name).setLevel(own)
    _shutting_down = False
    level = environ.get("HPCFUTURES_DASK_LOG_LEVEL", "WARNING").upper()
    for name in _DASK_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if level in ("DEBUG", "INFO"):
        return
    for name, pattern in _DUPLICATES.items():
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropDuplicateReport) for f in target.filters):
            target.addFilter(_DropDuplicateReport(pattern))
    loop_reports = logging.getLogger("asyncio")
    if not any(isinstance(f, _DropTornadoCancelledHandshake) for f in loop_reports.filters):
        loop_reports.addFilter(_DropTornadoCancelledHandshake())
    for name in ("asyncio", "tornado.application"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropAbandonedHandshake) for f in target.filters):
            target.addFilter(_DropAbandonedHandshake())


def _dask_loggers_with_levels() -> list[logging.Logger]:
    """Dask's loggers that decide their own level.

    The roots, and the children to which Dask's configuration gives a level of
    their own (``distributed.client`` at WARNING, ``tornado.application`` at
    ERROR): a level set on the root does not reach those.
    """
    found = [logging.getLogger(name) for name in _DASK_LOGGERS]
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (isinstance(logger, logging.Logger) and logger.level != logging.NOTSET
                and name.startswith(tuple(f"{root}." for root in _DASK_LOGGERS))):
            found.append(logger)
    return found


def quiet_for_shutdown() -> None:
    """Once the launch is ending, Dask's complaints about closing connections are noise.

    Called when the verdict is known (scheduler and workers); hpcfutures' own
    logger, which says how the launch ended, is not affected.  (A Ctrl-C'd
    client whose Dask client is reconnecting to the scheduler that the same
    Ctrl-C stopped: the loop's teardown cancels that reconnect, and
    ``distributed.client``, which keeps its own level, would log the
    ``CancelledError`` as an error.)
    """
    global _shutting_down
    _dask_own_levels()
    _shutting_down = True
    for logger in _dask_loggers_with_levels():
        logger.setLevel(logging.CRITICAL)


def shutting_down() -> bool:
    """Whether :func:`quiet_for_shutdown` silenced Dask for the rest of this launch:
    a block that silenced Dask for a moment must then leave it silent (the
    shutdown may have begun, on another thread, while the block ran)."""
    return _shutting_down


_shutting_down = False
#: Dask's loggers that have levels of their own, with Dask's levels, as first seen
#: (before hpcfutures changed any): what the next launch in this process starts from.
_OWN_LEVELS: dict[str, int] = {}


def _dask_own_levels() -> dict[str, int]:
    if not _OWN_LEVELS:
        _OWN_LEVELS.update({logger.name: logger.level
                            for logger in _dask_loggers_with_levels()
                            if logger.name not in _DASK_LOGGERS})
    return _OWN_LEVELS


@contextlib.contextmanager
def dask_silenced(*names: str) -> Iterator[None]:
    """Dask's loggers ``names`` (every one with a level of its own, if none is
    named) say nothing inside this block; their levels are restored afterwards,
    unless the launch's shutdown silenced Dask meanwhile (see :func:`shutting_down`).

    For what hpcfutures itself is ending: a task of Dask's that the loop's
    teardown cancels, the client's goodbye to a scheduler that may be gone.
    """
    loggers = ([logging.getLogger(name) for name in names] if names
               else _dask_loggers_with_levels())
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        if not _shutting_down:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


_RANK_HANDLERS: list[logging.Handler] = []


def configure_rank_logging(rank: int, role: str, launch_id: str,
                           environ=os.environ, log_dir: str | None = None) -> str | None:
    """Tag every log line of this process with its rank and role; maybe log to a file.

    On a cluster N processes write to one stream; ``[rank 37 worker]`` tells whose
    line it is.  With ``HPCFUTURES_LOG_DIR`` set, each rank also writes everything
    (INFO and up, Dask's included) to ``<dir>/<launch id>/rank-<rank>-<role>.log``,
    so a failure on rank 37 of 64 can be read on its own.  Returns that path.
    """
    fmt = logging.Formatter(
        f"%(asctime)s [rank {rank} {role}] %(levelname)s %(name)s: %(message)s")
    ours = logging.getLogger("hpcfutures")
    dask = logging.getLogger("distributed")
    for handler in _RANK_HANDLERS:
        ours.removeHandler(handler)
        dask.removeHandler(handler)
    _RANK_HANDLERS.clear()
    for handler in dask.handlers:  # Dask's own console handler
        handler.setFormatter(fmt)
    console = logging.StreamHandler()
    console.setFormatter(fmt)
    ours.addHandler(console)
    ours.propagate = False
    _RANK_HANDLERS.append(console)
    path = rank_log_path(rank, role, launch_id, environ, log_dir)
    if path is None:
        return None
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(fmt)
    to_file.setLevel(logging.INFO)
    console.setLevel(max(ours.getEffectiveLevel(), logging.WARNING))
    for target in (ours, dask):
        target.addHandler(to_file)
        if target.level > logging.INFO or target.level == logging.NOTSET:
            target.setLevel(logging.INFO)
    # Dask's console handler keeps showing warnings only.
    for handler in dask.handlers:
        if handler is not to_file:
            handler.setLevel(max(handler.level, logging.getLevelName(
                environ.get("HPCFUTURES_DASK_LOG_LEVEL", "WARNING").upper())))
    _RANK_HANDLERS.append(to_file)
    return path


def rank_log_path(rank: int, role: str, launch_id: str, environ=os.environ,
                  log_dir: str | None = None) -> str | None:
    """The file rank ``rank`` logs to, or None without a log directory.

    The directory is the ``log_dir`` setting where the caller has the
    settings, else ``HPCFUTURES_LOG_DIR`` (``hpcfutures run`` has only the
    environment).  One definition for the ranks that write the files and for
    whoever points the user at them (``hpcfutures run``, a broken executor's error).
    """
    directory = log_dir or environ.get(LOG_DIR_VAR)
    if not directory:
        return None
    return os.path.join(os.path.expanduser(directory), launch_id, f"rank-{rank}-{role}.log")


def where_to_read(rank: int, role: str, launch_id: str, environ=os.environ,
                  log_dir: str | None = None) -> str:
    """Where the user finds what rank ``rank`` said: its log file, else its tagged output."""
    path = rank_log_path(rank, role, launch_id, environ, log_dir)
    if path is not None and os.path.exists(path):
        return f"read {path}"
    if path is not None:
        # Seen from another node, a log directory that is not shared looks the same.
        return (f"it wrote no {path} here (it failed before it started logging, or that "
                "directory is not shared with this node): see its output")
    return (f"see its output (lines tagged [rank {rank} {role}]), or set {LOG_DIR_VAR} "
            "to keep one log file per rank")
