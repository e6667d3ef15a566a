"""What the copies of ``hpcfutures run`` write, on its own stdout and stderr, line by line.

Each copy's stdout and stderr are pipes read by one thread each; every line
(or ``\\r``-ended segment: a progress bar) goes out whole, after the
``[rank N role]`` tag of its copy, so lines of different ranks never mix.
hpcfutures' own log lines already carry that tag and get no second one.

The role starts as ``hpcfutures run`` guesses it from the environment; a copy
corrects it once it has negotiated (``launchers.run.announce_role``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from ..launchers.run import JOINED_MARK, ROLE_MARK

__all__ = ["Relay"]

#: A line, or a segment that ends in a carriage return (a progress bar redrawn).
_SEGMENT = re.compile(rb"[^\r\n]*(?:\r\n|\n|\r)")
#: Bytes at the start of a line where hpcfutures' log format has its tag.
_TAG_WINDOW = 64
#: Seconds to wait, once every copy has ended, for output still in the pipes
#: (a process the copy started may hold them open longer: it is not waited for).
DRAIN_WAIT = 5.0


class Relay:
    """Tags and forwards the output of every copy of one launch."""

    def __init__(self, roles: Sequence[str]) -> None:
        self.roles = list(roles)
        #: The ranks whose worker said it joined the scheduler.
        self.joined: set[int] = set()
        self._locks = {1: threading.Lock(), 2: threading.Lock()}
        self._threads: list[threading.Thread] = []

    def role(self, rank: int) -> str:
        """The role of ``rank``: as the copy announced it, else as guessed."""
        return self.roles[rank]

    def still_starting(self, rank: int) -> bool:
        """Whether ``rank`` is a worker that has not joined the scheduler (yet)."""
        return self.roles[rank] == "worker" and rank not in self.joined

    def follow(self, rank: int, stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> None:
        """Start relaying one copy's pipes."""
        for pipe, fd in ((stdout, 1), (stderr, 2)):
            if pipe is None:
                continue
            thread = threading.Thread(target=self._copy, args=(rank, pipe, fd), daemon=True,
                                      name=f"hpcfutures-run-relay-{rank}-{fd}")
            thread.start()
            self._threads.append(thread)

    def drain(self, timeout: float = DRAIN_WAIT) -> None:
        """Wait (at most ``timeout`` s) for what the ended copies left in their pipes."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _copy(self, rank: int, pipe: IO[bytes], fd: int) -> None:
        pending = b""
        with pipe:
            while True:
                try:
                    chunk = os.read(pipe.fileno(), 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                pending += chunk
                end = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
                if end:
                    self._emit(rank, fd, pending[:end])
                    pending = pending[end:]
        if pending:
            self._emit(rank, fd, pending + b"\n")

    def _emit(self, rank: int, fd: int, data: bytes) -> None:
        out: list[bytes] = []
        for segment in _SEGMENT.findall(data):
            if segment.startswith(ROLE_MARK):
                self.roles[rank] = segment[len(ROLE_MARK):].strip().decode(errors="replace")
                continue
            if segment.startswith(JOINED_MARK):
                self.joined.add(rank)
                continue
            if f"[rank {rank} ".encode() in segment[:_TAG_WINDOW]:
                out.append(segment)  # a log line: it has its tag
            else:
                out.append(f"[rank {rank} {self.roles[rank]}] ".encode() + segment)
        if out:
            with self._locks[fd]:
                _write(fd, b"".join(out))


def _write(fd: int, data: bytes) -> None:
    """To our stdout or stderr (through Python's stream: it may have been replaced)."""
    stream = sys.stdout if fd == 1 else sys.stderr
    try:
        stream.flush()
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            stream.write(data.decode(errors="replace"))
            stream.flush()
    except (OSError, ValueError):  # our own output is gone (a closed pipe): drop it
        pass
