"""Every error hpcfutures raises, under one root.

::

    HPCFuturesError
    ├── ConfigurationError (ValueError)       bad option or environment variable
    │   └── NotEnoughRanksError               too few processes for the roles
    ├── LauncherError (RuntimeError)          the launcher's environment is unusable
    ├── SchedulerFileError (RuntimeError)     unreadable, foreign or unsafe scheduler file
    ├── StartupTimeoutError (TimeoutError)    a peer did not appear before the deadline
    └── BrokenHPCExecutor (BrokenExecutor)    the scheduler or all workers are gone

Each class also derives from the built-in exception callers already catch, so
``except TimeoutError`` or ``except concurrent.futures.BrokenExecutor`` keeps
working when code moves from the standard library to hpcfutures.
"""

from __future__ import annotations

from concurrent.futures import BrokenExecutor

__all__ = [
    "BrokenHPCExecutor",
    "ConfigurationError",
    "HPCFuturesError",
    "LauncherError",
    "NotEnoughRanksError",
    "SchedulerFileError",
    "StartupTimeoutError",
]


class HPCFuturesError(Exception):
    """Root of every error raised by hpcfutures itself."""


class ConfigurationError(HPCFuturesError, ValueError):
    """An option, environment variable or Dask config value is invalid."""


class NotEnoughRanksError(ConfigurationError):
    """The launch has fewer processes than the roles need."""


class LauncherError(HPCFuturesError, RuntimeError):
    """The launcher's environment is missing or inconsistent."""


class SchedulerFileError(HPCFuturesError, RuntimeError):
    """A scheduler file cannot be trusted: foreign launch, unsafe mode, bad content."""


class StartupTimeoutError(HPCFuturesError, TimeoutError):
    """Something a process waited for at start-up did not happen in time."""


class BrokenHPCExecutor(HPCFuturesError, BrokenExecutor):
    """The executor lost its scheduler or all its workers and cannot run tasks."""


class RemoteTraceback(Exception):
    """Carries the formatted traceback of a task that failed on a worker.

    It is attached as ``__cause__`` of the re-raised exception, the way
    ``ProcessPoolExecutor`` does it, so the user sees where on the cluster the
    error happened as well as where it surfaced.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class LaunchFinished(HPCFuturesError):
    """Internal: this process started after the client had already finished.

    A late job-array element or worker sees this instead of a timeout and exits
    with status 0, because there is nothing left for it to do.
    """
