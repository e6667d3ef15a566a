"""Worker processes for the laptop default, started as children of the client.

Each child runs :mod:`hpcfutures._worker_process`, which plays the same worker
role as a rank of a real launch; it learns the scheduler's address (and the
parent's ``sys.path``, so functions from the user's modules import) through its
standard input, never through the environment or a file.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

__all__ = ["LocalWorkers"]

logger = logging.getLogger("hpcfutures")


class LocalWorkers:
    """``count`` local worker processes connected to ``address``."""

    def __init__(self, count: int, config: dict) -> None:
        self.count = count
        self.config = config
        self.processes: list[subprocess.Popen] = []

    def start(self) -> LocalWorkers:
        for index in range(self.count):
            config = {**self.config, "name": f"local-{index}", "sys_path": sys.path}
            process = subprocess.Popen(
                [sys.executable, "-m", "hpcfutures._worker_process"],
                stdin=subprocess.PIPE,
            )
            self.processes.append(process)
            assert process.stdin is not None
            process.stdin.write(json.dumps(config).encode())
            process.stdin.close()
        return self

    def alive(self) -> int:
        return sum(process.poll() is None for process in self.processes)

    def stop(self, grace: float = 10.0) -> None:
        """Wait for the workers to leave after the scheduler closed; end stragglers."""
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("local worker %d did not exit in %g s; killing it", process.pid, grace)
                process.kill()
                process.wait()
