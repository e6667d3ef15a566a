"""Logging defaults: Dask's chatter stays out of the user's way.

Dask logs every start, stop and closed connection at INFO, and reports every
failed task (and every object it cannot pickle) at ERROR even though the
client re-raises that very error on the task's future.  hpcfutures shows Dask's
warnings and errors only, without those duplicate reports;
``HPCFUTURES_DASK_LOG_LEVEL=INFO`` brings everything back.
"""

from __future__ import annotations

import logging
import os

__all__ = ["quiet_dask_logging"]

_DASK_LOGGERS = ("distributed", "tornado")

#: (logger, message prefix) of reports that duplicate an error the user gets anyway.
_DUPLICATES = {
    "distributed.worker": "Compute Failed",
    "distributed.protocol.pickle": "Failed to serialize",
}


class _DropDuplicateReport(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_dask_logging(environ=os.environ) -> None:
    """Apply hpcfutures' default level to Dask's loggers (idempotent)."""
    level = environ.get("HPCFUTURES_DASK_LOG_LEVEL", "WARNING").upper()
    for name in _DASK_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if level in ("DEBUG", "INFO"):
        return
    for name, prefix in _DUPLICATES.items():
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropDuplicateReport) for f in target.filters):
            target.addFilter(_DropDuplicateReport(prefix))
