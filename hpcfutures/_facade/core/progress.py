"""The progress bar of ``Executor.map``: tqdm, optional, and silent unless wanted.

Off by default; then :func:`open_bar` returns ``None`` at once and a map pays
for nothing (tqdm is not even imported).  On, the bar counts *calls* as their
chunks come back from the workers, so it moves even while the caller waits
for an early, slow item.

Cluster jobs write stderr to files, and a bar redrawn there fills the file with
carriage returns; so ``progress=True`` (mode ``"auto"``) draws only when
stderr is a terminal (or a Jupyter kernel's stream), and ``"always"`` is the
way to ask for the bar anyway.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from typing import Any, TextIO

from ..._errors import MissingDependencyError
from ..._support.values import to_progress
from ...launchers.run import TERMINAL_VAR

__all__ = ["MapProgress", "open_bar", "progress_mode"]


def progress_mode(value: Any) -> str:
    """A per-call ``progress=`` value as ``'off'``, ``'auto'`` or ``'always'``."""
    try:
        return to_progress(value)
    except ValueError as err:
        raise ValueError(f"progress: {err}") from None


def _require_tqdm() -> None:
    if sys.modules.get("tqdm") is not None or importlib.util.find_spec("tqdm") is not None:
        return
    raise MissingDependencyError(
        "a progress bar was asked for (progress=True, or HPCFUTURES_PROGRESS), but tqdm "
        "is not installed: pip install tqdm (or pip install 'hpcfutures[progress]'), "
        "or turn progress off")


def _interactive(stream: TextIO) -> bool:
    """A terminal (also one that ``hpcfutures run`` relays this process's output to),
    or the output stream of a Jupyter kernel (which shows the bar)."""
    try:
        if stream.isatty():
            return True
        if stream is sys.__stderr__ and os.environ.get(TERMINAL_VAR) == "1":
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return type(stream).__module__.startswith("ipykernel")


class MapProgress:
    """One map's bar; :meth:`advance` may be called from any thread."""

    def __init__(self, total: int | None, desc: str, stream: TextIO) -> None:
        from tqdm import tqdm

        self._lock = threading.Lock()
        self._closed = False
        self._bar = tqdm(total=total, desc=desc, unit="call", file=stream,
                         dynamic_ncols=True, leave=True)

    def advance(self, calls: int) -> None:
        with self._lock:
            if not self._closed and calls:
                self._bar.update(calls)

    def close(self) -> None:
        """Draw the final state once; later calls do nothing."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._bar.close()


def open_bar(mode: str, total: int | None, fn: Any) -> MapProgress | None:
    """A bar for a map of ``total`` calls of ``fn``, or None when none is to be drawn.

    Raises :class:`MissingDependencyError` whenever a bar is asked for and tqdm
    is missing, terminal or not, so a script fails the same way everywhere.
    """
    if mode == "off":
        return None
    _require_tqdm()
    stream = sys.stderr
    if stream is None or (mode == "auto" and not _interactive(stream)):
        return None
    return MapProgress(total, getattr(fn, "__name__", "map"), stream)
