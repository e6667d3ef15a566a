"""Worker processes for the laptop default, started as children of the client.

Each child runs :mod:`hpcfutures._launch.worker_process`, which plays the same worker
role as a rank of a real launch; it learns the scheduler's address (and the
parent's ``sys.path``, so functions from the user's modules import) through its
standard input, never through the environment or a file.  The parent keeps that
pipe open while it lives: when it dies without ending its launch (SIGKILL), the
pipe closes and the child leaves at once, even with calls running.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from typing import Any

from .._support.signals import children_start_deaf_to_ctrl_c

__all__ = ["LocalWorkers", "join_options"]

logger = logging.getLogger("hpcfutures")


def join_options(settings: Any, identity: Any, address: str, host: str | None,
                 interface: str | None, credentials: dict[str, str]) -> dict[str, Any]:
    """What the local worker processes need to join the scheduler at ``address``."""
    return {
        "address": address,
        "nthreads": settings.threads_per_worker or identity.threads or 1,
        # e.g. a Slurm batch script's --mem, shared among its local workers
        "memory_limit": settings.memory_limit or identity.memory_limit,
        "host": host,
        "interface": interface,
        "timeout": settings.timeout,
        "credentials": credentials,
    }


class LocalWorkers:
    """``count`` local worker processes, started early and told the address later.

    The processes are spawned before the client has even imported Dask, so
    their start-up (Python plus ``import distributed``) overlaps the client's;
    :meth:`connect` then hands them the scheduler's address.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen] = []
        #: The pids of the processes given their configuration (their pipe stays open).
        self._told: set[int] = set()

    def spawn(self) -> LocalWorkers:
        with children_start_deaf_to_ctrl_c():  # a Ctrl-C now is the parent's to handle
            for _ in range(self.count):
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "hpcfutures._launch.worker_process"],
                    stdin=subprocess.PIPE,
                ))
        return self

    def connect(self, config: dict) -> None:
        """Send each process its worker configuration (address, name, sys.path)."""
        for index, process in enumerate(self.processes):
            assert process.stdin is not None
            message = {**config, "name": f"local-{index}", "sys_path": sys.path,
                       **_gpu_options(index, self.count)}
            try:  # one line; the pipe stays open (the child's sign that we live)
                process.stdin.write(json.dumps(message).encode() + b"\n")
                process.stdin.flush()
                self._told.add(process.pid)
            except BrokenPipeError:
                logger.warning("local worker %d exited before it could start", process.pid)

    def connect_abandoned(self) -> None:
        """Close the pipes of processes that never got an address, so they exit."""
        self._close_pipes([p for p in self.processes if p.pid not in self._told])

    @staticmethod
    def _close_pipes(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            if process.stdin is not None and not process.stdin.closed:
                try:
                    process.stdin.close()
                except BrokenPipeError:
                    pass

    def alive(self) -> int:
        return sum(process.poll() is None for process in self.processes)

    def stop(self, grace: float = 1.0) -> None:
        """End the workers once the scheduler has closed.

        A worker that already joined leaves by itself within moments; one still
        starting up would keep trying to reach the vanished scheduler, so after
        ``grace`` seconds the rest are terminated (nothing is lost: the
        scheduler is gone).
        """
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                logger.warning("local worker %d ignored SIGTERM; killing it", process.pid)
                process.kill()
                process.wait()
        self._close_pipes(self.processes)  # only now: they have left


def _gpu_options(index: int, count: int) -> dict[str, Any]:
    """Local worker ``index``'s share of the GPUs this process sees (``_support/gpus.py``)."""
    import os

    from .._support.gpus import share_of

    share = share_of(os.environ, index, count)
    return {"gpus": share.count, "workers_on_host": count, "gpu_ids": list(share.ids),
            "gpu_variables": list(share.variables), "gpu_own": share.own}
