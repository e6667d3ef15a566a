"""Address exchange through a private scheduler file.

The scheduler writes its :class:`SchedulerInfo` as JSON, atomically (temporary
file + rename) and with mode 0600, because with TLS the file carries the
launch's credentials.  Readers trust a file only if it is theirs, private, and
stamped with their own launch id; one whose scheduler is known to be dead, or
that the caller already failed to reach, is skipped while waiting for a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import stat
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import cast

from .._errors import LaunchFinished, SchedulerFileError, StartupTimeoutError
from .._support import interleave
from .._support.config import expand_template
from .._support.patience import in_seconds, shared_file_poll
from ._exchange import AddressExchange, SchedulerInfo
from ._identity import Identity

__all__ = ["JobFileExchange", "SchedulerFileExchange", "default_scheduler_file",
           "read_scheduler_file", "template_fields"]

logger = logging.getLogger("hpcfutures")

DEFAULT_TEMPLATE = "~/.hpcfutures/scheduler-{launch_id}.json"
#: Seconds a "launch finished" tombstone is kept before a later launch deletes it.
TOMBSTONE_LIFETIME = 24 * 3600.0
#: Clock difference tolerated between the batch system's controller and the scheduler's node.
CLOCK_SLACK = 5.0


def default_scheduler_file(template: str | None, fields: dict[str, str]) -> Path:
    """Expand the scheduler-file template with the launch's fields."""
    return expand_template(template or DEFAULT_TEMPLATE, fields, "scheduler_file")


def template_fields(identity: Identity) -> dict[str, str]:
    """What a path template may use: ``{launch_id}``, ``{user}`` and the launcher's fields."""
    return {"launch_id": identity.launch_id, "user": _user(), **identity.fields}


class SchedulerFileExchange(AddressExchange):
    """Publish and find the scheduler through a 0600 JSON file."""

    def __init__(self, path: Path, launch_id: str, rank: int, tombstone: bool = False) -> None:
        self.path = Path(path)
        self.launch_id = launch_id
        self.rank = rank
        #: Leave a "finished" marker instead of deleting the file, so processes
        #: that start after the end (late job-array elements) exit at once.
        self.tombstone = tombstone
        self.description = f"scheduler file {self.path}"
        #: When this rank began looking for the scheduler (a look again after a
        #: failed probe keeps its slow pace: see _looking).
        self._first_look: float | None = None
        #: When this rank last read the file while looking.
        self._last_read: float | None = None

    @classmethod
    def for_launch(cls, settings, identity, tombstone: bool = False) -> SchedulerFileExchange:
        path = default_scheduler_file(settings.scheduler_file, template_fields(identity))
        return cls(path, identity.launch_id, identity.rank, tombstone=tombstone)

    # ---------------------------------------------------------------- publish
    def publish(self, info: SchedulerInfo) -> None:
        _write_private(self.path, info.to_json())
        _sweep_old_tombstones(self.path.parent)

    def finish(self, info: SchedulerInfo) -> None:
        current = self._read_quietly()
        if current is not None and current.nonce != info.nonce:
            return  # someone else's scheduler now owns the file
        if self.tombstone:
            done = SchedulerInfo(address="", launch_id=info.launch_id, nonce=info.nonce,
                                 finished=True, serving=info.serving)
            _write_private(self.path, done.to_json())
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def is_finished(self, info: SchedulerInfo) -> bool:
        """Over when the scheduler retracted its file, tombstoned it, or was replaced."""
        try:
            current = self._read_quietly()
        except SchedulerFileError:
            return False
        return current is None or current.finished or current.nonce != info.nonce

    # ----------------------------------------------------------------- lookup
    def lookup(self, timeout: float, stale: SchedulerInfo | None = None) -> SchedulerInfo:
        looking = self._looking(timeout, stale)
        while True:
            try:
                pause = next(looking)
            except StopIteration as found:
                return cast(SchedulerInfo, found.value)
            time.sleep(pause)

    async def lookup_async(self, timeout: float,
                           stale: SchedulerInfo | None = None) -> SchedulerInfo:
        looking = self._looking(timeout, stale)
        while True:
            try:
                pause = next(looking)
            except StopIteration as found:
                return cast(SchedulerInfo, found.value)
            await asyncio.sleep(pause)

    def _looking(self, timeout: float,
                 stale: SchedulerInfo | None) -> Generator[float, None, SchedulerInfo]:
        """Read the file until it is usable; yields the seconds to wait between reads
        (:func:`shared_file_poll`), returns what it found."""
        started = time.monotonic()
        deadline = started + timeout
        if self._first_look is None:
            self._first_look = started
        # A look again (after a refused probe, ``stale``, or a silent one, which
        # wants the same file again) goes on at the pace the rank had reached:
        # restarted from quick looks, every rank whose probe of a busy scheduler
        # failed would read the file many times a second.  One exchange serves one rank's
        # part in one launch, so every look after its first is a look again.
        first_look = self._first_look
        if self._last_read is not None:
            # ... and the first look again waits for its turn too (right after
            # the probe, it would come a moment after the read that found the file).
            since = started - self._last_read
            pause = shared_file_poll(started - first_look) - since
            if pause > 0:
                yield min(pause, timeout)
        reported: set[str] = set()
        while True:
            delay = interleave.pause("before-read", self.rank)
            if delay:
                yield delay
            self._last_read = time.monotonic()
            info = self._read_quietly()
            if info is not None:
                verdict = self._judge(info, stale)
                if verdict is None:
                    return info
                if verdict not in reported:
                    reported.add(verdict)
                    logger.info("ignoring %s: %s; waiting for a fresh one", self.path, verdict)
            self._while_waiting()
            now = time.monotonic()
            if now >= deadline:
                raise StartupTimeoutError(
                    f"rank {self.rank} waited {in_seconds(timeout)} for the scheduler file "
                    f"{self.path} "
                    f"(launch {self.launch_id}) and none usable appeared"
                    + (f" ({'; '.join(sorted(reported))})" if reported else "")
                    + ". Check the output of the scheduler's rank (rank 0) for an error, make "
                    "sure the path is on a filesystem every rank sees, or raise the deadline "
                    "with timeout= / HPCFUTURES_TIMEOUT."
                )
            yield max(0.0, min(shared_file_poll(now - first_look), deadline - now))

    def _while_waiting(self) -> None:
        """Called between reads while no usable file is there; may raise to stop waiting."""

    def _judge(self, info: SchedulerInfo, stale: SchedulerInfo | None) -> str | None:
        """Why ``info`` cannot be used, or None if it can."""
        if info.launch_id != self.launch_id:
            return f"it belongs to launch {info.launch_id!r}, not {self.launch_id!r}"
        if info.finished:
            raise LaunchFinished(f"the launch {self.launch_id} has already finished")
        if stale is not None and info.nonce == stale.nonce:
            return f"its scheduler at {info.address} could not be reached"
        if info.is_dead_locally():
            return f"its scheduler process {info.pid} on this host is gone"
        return None

    def _read_quietly(self) -> SchedulerInfo | None:
        """The file's content; None while it is absent or half-written."""
        return read_scheduler_file(self.path)


class JobFileExchange(SchedulerFileExchange):
    """The scheduler file of a batch job's launch: tombstoned at the end, wary of old tombstones.

    Ranks of a batch job start when their node gets to them, seconds apart on a
    busy cluster, and may start after the client finished.  A late rank that
    finds the "finished" marker exits 0 at once; without the marker it would
    wait out the whole start-up timeout for a scheduler that has gone, and fail
    a launch that succeeded.

    A job id comes back when the batch system's state is wiped (a fresh cluster
    counts from 1 again), so a marker written before this job was submitted
    belongs to an earlier job with the same id and is ignored.  ``submitted``
    says when the job was submitted (epoch seconds, None if the batch system
    cannot tell: the marker is then trusted); it is asked only when a marker is
    found, once per marker.
    """

    #: What the launch is called in messages: a Slurm step's "job", an "array".
    kind = "job"

    def __init__(self, path: Path, launch_id: str, rank: int, *, job_id: str,
                 submitted: Callable[[str], float | None]) -> None:
        super().__init__(path, launch_id, rank, tombstone=True)
        self.job_id = job_id
        self._submitted = submitted
        self._predates: dict[str, bool] = {}

    def _judge(self, info: SchedulerInfo, stale: SchedulerInfo | None) -> str | None:
        if info.finished and info.launch_id == self.launch_id and self._older_than_job(info):
            return (f"it is the end marker of an earlier {self.kind} with the same job id "
                    f"{self.job_id} (written before this {self.kind} was submitted)")
        return super()._judge(info, stale)

    def _older_than_job(self, info: SchedulerInfo) -> bool:
        if info.nonce not in self._predates:
            submitted = self._submitted(self.job_id)
            self._predates[info.nonce] = (submitted is not None
                                          and info.created < submitted - CLOCK_SLACK)
        return self._predates[info.nonce]


def read_scheduler_file(path: Path) -> SchedulerInfo | None:
    """A scheduler file's content if it is yours and private; None while it is absent.

    Raises :class:`SchedulerFileError` for a foreign, group/world-readable or
    garbled file.  Readers outside the launch (``hpcfutures.connect``) use it too.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd) as handle:
        _check_private(path, os.fstat(handle.fileno()))
        text = handle.read()
    try:
        return SchedulerInfo.from_json(text)
    except (ValueError, TypeError) as err:
        raise SchedulerFileError(
            f"{path} is not a valid hpcfutures scheduler file ({err}); "
            "remove it or choose another scheduler_file"
        ) from err


def _sweep_old_tombstones(directory: Path, age: float = TOMBSTONE_LIFETIME) -> None:
    """Delete tombstones of launches that ended long ago, so they don't pile up."""
    cutoff = time.time() - age
    try:
        candidates = [p for p in directory.glob("scheduler-*.json") if p.stat().st_mtime < cutoff]
    except OSError:
        return
    for path in candidates:
        try:
            if SchedulerInfo.from_json(path.read_text()).finished:
                path.unlink()
        except (OSError, ValueError, TypeError):
            continue


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _check_private(path: Path, st: os.stat_result) -> None:
    """Refuse a file another user owns or could have read: it may hold credentials."""
    if st.st_uid != os.getuid():
        raise SchedulerFileError(
            f"refusing scheduler file {path}: it is owned by uid {st.st_uid}, not by you "
            f"(uid {os.getuid()}); another user's scheduler must never run your tasks"
        )
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SchedulerFileError(
            f"refusing scheduler file {path}: its mode is {stat.filemode(st.st_mode)}, so other "
            "users could read the scheduler's credentials. hpcfutures writes it 0600; remove "
            "the file (or chmod 600 it) and start again"
        )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only."""
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
