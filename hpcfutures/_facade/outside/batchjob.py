"""One batch job that serves a launch: submitted, watched, cancelled; awaited until it serves.

:func:`~hpcfutures.allocate` submits one for its scheduler and more for
``scale()``, and ``hpcfutures submit`` one from the command line.  Nothing
here connects to the launch: the job's scheduler file says when it serves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..._errors import NotServingError, QueueTimeoutError, StartupTimeoutError
from ..._launch.outside import serving_info
from ..._support.backoff import Backoff
from ...launchers._batchscript import BatchSystem, JobState, Request
from ...launchers._exchange import SchedulerInfo
from ...launchers._schedfile import read_scheduler_file

__all__ = ["Allocation", "await_serving"]

logger = logging.getLogger("hpcfutures")

#: Longest pause between two looks at the queue.
POLL_CAP = 2.0


class Allocation:
    """One submitted job: its batch system, id, script, scheduler file and output."""

    def __init__(self, system: BatchSystem, request: Request, job_dir: Path,
                 command: Sequence[str], *, token: str | None = None,
                 environment: dict[str, str] | None = None,
                 status_file: str | None = None) -> None:
        self.system, self.request = system, request
        self.token = token or uuid.uuid4().hex[:12]
        self.script_path = job_dir / f"{request.name}-{self.token}.sh"
        self.output = Path(request.output) if request.output else \
            job_dir / f"{request.name}-{self.token}.out"
        request = Request(**{**vars(request), "output": str(self.output)})
        self.script = system.script(request, command, status_file=status_file,
                                    environment=environment or {})
        self.job = ""

    def __str__(self) -> str:
        return f"{self.system.title} job {self.job}"

    def submit(self) -> str:
        """Write the script (kept beside the output, for the record) and submit it."""
        self.script_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.script_path.write_text(self.script)
        self.job = self.system.submit(str(self.script_path))
        logger.info("submitted %s (script %s, output %s)", self, self.script_path, self.output)
        return self.job

    def state(self) -> JobState | None:
        return self.system.state(self.job)

    def read_scheduler_file(self, path: Path) -> SchedulerInfo | None:
        """The job's scheduler file (None while absent), where the job writes it."""
        return read_scheduler_file(path)

    def cancel(self) -> None:
        said = self.system.cancel(self.job)
        if said is not None and self.state() is not JobState.GONE:
            logger.warning("could not cancel %s: %s", self, said)

    def output_tail(self, lines: int = 15) -> str:
        try:
            text = self.output.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no output at {self.output} yet)"
        return "\n".join(text) or "(empty)"

    def leave_queue(self, grace: float) -> None:
        """Wait up to ``grace`` s for the job to end by itself, then cancel it; wait till gone."""
        if self._gone_within(grace):
            return
        self.cancel()
        if not self._gone_within(max(grace, 30.0)):
            logger.warning("%s is still in the queue after it was cancelled", self)

    def _gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        backoff = Backoff(first=0.1, cap=1.0)
        while self.state() is not JobState.GONE:
            if time.monotonic() >= deadline:
                return False
            backoff.sleep(deadline)
        return True


def await_serving(allocation: Allocation, path: Path, queue_timeout: float | None,
                  timeout: float) -> None:
    """Return once the job serves through ``path``; cancel it and raise if it cannot.

    Two deadlines: ``queue_timeout`` while it is queued (None: no limit, as a
    queue may hold a job for hours), then ``timeout`` from the moment it runs.
    """
    started = time.monotonic()
    running_since: float | None = None
    backoff = Backoff(first=0.1, cap=POLL_CAP)
    while True:
        state = allocation.state()
        with contextlib.suppress(NotServingError):
            serving_info(path, allocation.read_scheduler_file)
            return
        now = time.monotonic()
        if state is JobState.GONE:
            raise NotServingError(
                f"{allocation} ended before it served (scheduler file {path} never written); "
                f"its output {allocation.output} ends with:\n{allocation.output_tail()}")
        if state is JobState.RUNNING and running_since is None:
            running_since = now
        if running_since is None and queue_timeout is not None and now - started >= queue_timeout:
            allocation.cancel()
            raise QueueTimeoutError(
                f"{allocation} was still queued after queue_timeout={queue_timeout:g} s, so it "
                f"was cancelled. Ask for less (nodes, time, memory), another partition, or wait "
                f"longer (queue_timeout=None waits as long as the queue takes)")
        if running_since is not None and now - running_since >= timeout:
            allocation.cancel()
            raise StartupTimeoutError(
                f"{allocation} ran for {timeout:g} s without writing its scheduler file {path}, "
                f"so it was cancelled; its output {allocation.output} ends with:\n"
                f"{allocation.output_tail()}")
        backoff.sleep(now + POLL_CAP)


def submit_components(allocation: Allocation, components: Sequence[Request],
                      command: list[str], submitted: list[Allocation]) -> None:
    """Submit one job per further component of ``allocation`` (a batch system
    without heterogeneous jobs), each running ``command``; each job goes into
    ``submitted`` as soon as it is in the queue, for the caller to cancel."""
    for number, component in enumerate(components, start=1):
        job = Allocation(allocation.system, dataclasses.replace(
            component, name=f"{component.name}-{number}"),
            allocation.script_path.parent, command)
        job.submit()
        submitted.append(job)


def adaptive_target(waiting: int, threads: int, jobs: int, minimum: int, maximum: int) -> int:
    """How many worker jobs adapt() wants: one more while calls wait beyond the threads
    there are, else as many as now (idle workers leave by themselves), never outside
    [minimum, maximum]."""
    return max(minimum, min(maximum, jobs + 1 if waiting > threads else jobs))
