"""Logging defaults: Dask's chatter stays out of the user's way.

Dask logs every start, stop and closed connection at INFO, and every failed
task on the worker at ERROR even though the client re-raises it.  hpcfutures
shows Dask's warnings and errors only, without the per-task "Compute Failed"
reports; ``HPCFUTURES_DASK_LOG_LEVEL=INFO`` brings everything back.
"""

from __future__ import annotations

import logging
import os

__all__ = ["quiet_dask_logging"]

_DASK_LOGGERS = ("distributed", "tornado")


class _DropTaskFailures(logging.Filter):
    """The client re-raises a task's exception; the worker need not report it too."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Compute Failed")


_FILTER = _DropTaskFailures()


def quiet_dask_logging(environ=os.environ) -> None:
    """Apply hpcfutures' default level to Dask's loggers (idempotent)."""
    level = environ.get("HPCFUTURES_DASK_LOG_LEVEL", "WARNING").upper()
    for name in _DASK_LOGGERS:
        logging.getLogger(name).setLevel(level)
    worker_logger = logging.getLogger("distributed.worker")
    if _FILTER not in worker_logger.filters:
        worker_logger.addFilter(_FILTER)
