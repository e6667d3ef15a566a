"""On the laptop, the scheduler's verdict line comes after the user's traceback, or not at all.

The scheduler runs in the client's process there; see :func:`verdict_after_traceback`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
from collections.abc import Iterator

__all__ = ["verdict_after_traceback"]

logger = logging.getLogger("hpcfutures")


class HeldVerdict(logging.Filter):
    """Keeps back the scheduler's "ending the launch with status N" line."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("ending the launch"):
            self.records.append(record)
            return False
        return True


@contextlib.contextmanager
def verdict_after_traceback(hold: bool) -> Iterator[None]:
    """On the laptop, the scheduler's verdict comes after the user's traceback.

    The scheduler runs in the client's process there: it logs why the launch
    ends while the user's exception is still on its way out of the ``with``
    block, so its line would come before the traceback that explains it.  It
    is logged at interpreter exit instead, after Python printed the traceback,
    and only if the exception did end the program: a script (or a notebook, a
    test run) that caught it carries on, and the line would then be false news.
    """
    if not hold:
        yield
        return
    held = HeldVerdict()
    logger.addFilter(held)
    try:
        yield
    finally:
        logger.removeFilter(held)
        if held.records:
            atexit.register(_log_records, held.records)


def _log_records(records: list[logging.LogRecord]) -> None:
    # Python sets sys.last_value when it prints an uncaught exception at exit.
    if getattr(sys, "last_value", None) is None:
        return
    for record in records:
        logger.handle(record)
