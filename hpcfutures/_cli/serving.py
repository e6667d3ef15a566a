"""One rank of a serving launch, as ``hpcfutures serve`` and ``hpcfutures join`` play it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["play_serving_role"]


def play_serving_role(command: str, play: Callable[[Any], int],
                      overrides: dict[str, Any]) -> int:
    """Run ``play(settings)`` as one rank of a serving launch, then leave at once.

    Shared by ``hpcfutures serve`` and ``hpcfutures join``: an hpcfutures error
    is one line (status 2 for a bad setting, else 1), never a traceback.
    """
    import logging
    import os

    from .._errors import HPCFuturesError
    from .._support.config import resolve_settings

    try:
        status = play(resolve_settings(overrides))
    except HPCFuturesError as err:
        print(f"hpcfutures {command}: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    # Leave at once, as every serving rank of a launch does: a task still
    # running in a worker thread must not keep the rank (and the job) alive.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
