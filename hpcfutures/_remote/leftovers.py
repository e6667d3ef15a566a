"""Processes that the calls of a worker started and left running, ended with it.

A call may start processes and not wait for them (``subprocess.Popen`` of a
helper, a server, a pool it never closed).  When the worker's process leaves,
they would live on, reparented; under ``mpiexec`` they also hold the job's
output pipes, and Hydra returns only once every holder has closed them: the
finished launch would never end, on an allocation that keeps being billed.
Slurm ends a step's stray processes itself; other launchers do not.

So a worker ends them as it leaves: SIGTERM first (a helper may clean up),
SIGKILL for those still there after a short grace.  Only its own descendants:
a process that detached itself to init is out of reach, as it is for anyone.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from . import deathwatch

__all__ = ["LEFTOVER_GRACE", "end_leftover_processes"]

logger = logging.getLogger("hpcfutures")

#: Seconds the processes get between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 1.0


def end_leftover_processes(grace: float = LEFTOVER_GRACE) -> list[int]:
    """End the processes this worker's calls left running; their process ids."""
    try:
        import psutil  # a dependency of distributed's

        children = psutil.Process().children(recursive=True)
    except Exception:  # psutil missing or /proc unreadable: nothing known, nothing ended
        return []
    ours = deathwatch.watcher_pids()
    left = [child for child in children if child.pid not in ours and not _leaves_by_itself(child)]
    if not left:
        return []
    logger.info("ending %d process(es) that calls started and left running: %s", len(left),
                ", ".join(str(child.pid) for child in left))
    for child in left:
        _signal(child, signal.SIGTERM)
    _, alive = psutil.wait_procs(left, timeout=grace)
    for child in alive:
        _signal(child, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=grace)
    return [child.pid for child in left]


#: Helpers of multiprocessing's that end by themselves once this process has left
#: (their pipe to it closes), cleaning up after it: they ignore SIGTERM.
_SELF_ENDING = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _leaves_by_itself(process: Any) -> bool:
    try:
        command = " ".join(process.cmdline())
    except Exception:  # gone meanwhile
        return True
    return any(helper in command for helper in _SELF_ENDING)


def _signal(process: Any, signum: int) -> None:
    try:
        process.send_signal(signum)
    except Exception:  # gone meanwhile, or not ours to signal any more
        logger.debug("could not signal process %s", getattr(process, "pid", "?"))
