"""Every error hpcfutures raises, under one root.

::

    HPCFuturesError
    ├── ConfigurationError (ValueError)       bad option or environment variable
    │   └── NotEnoughRanksError               too few processes for the roles
    ├── LauncherError (RuntimeError)          the launcher's environment is unusable
    ├── LaunchEndedError (RuntimeError)       a second executor in a launch that has ended
    ├── NestedExecutorError (RuntimeError)    an executor was created inside a task
    ├── MissingDependencyError (ImportError)  an optional package a setting needs is absent
    ├── SchedulerFileError (RuntimeError)     unreadable, foreign or unsafe scheduler file
    ├── StartupTimeoutError (TimeoutError)    a peer did not appear before the deadline
    │   └── QueueTimeoutError                 allocate(): the job stayed queued too long
    ├── StopTimeoutError (TimeoutError)       a serving launch did not confirm its stop
    ├── AllocationError (RuntimeError)        allocate(), submit: the batch system refused
    ├── NotServingError (ConnectionError)     connect(): no serving launch behind the file
    ├── VersionMismatchError (RuntimeError)   the client, scheduler or workers run another
    │                                         Python or hpcfutures/distributed/cloudpickle
    ├── SSHError (ConnectionError)            ssh=: login, host key, forwarding or the
    │                                         connection failed (says what ssh said)
    ├── SerializationError (TypeError,        a call, its arguments or its result could
    │       pickle.PicklingError)             not be pickled
    ├── RemoteExceptionError (RuntimeError)   a call raised an exception whose class the
    │                                         client cannot import (its name, text kept)
    ├── TaskMemoryError (MemoryError)         a task crossed its worker's memory limit
    ├── WorkerCrashError (RuntimeError)       a call killed its worker process (or its
    │                                         worker was lost too often)
    ├── NoSuitableWorkerError (RuntimeError)  a call's needs fit no worker left: those
    │                                         that had them are gone
    ├── TimeLimitError (RuntimeError)         a call never started: the executor drained
    │                                         before the allocation's end
    └── BrokenHPCExecutor (BrokenExecutor)    the scheduler or all workers are gone, or
        │                                     a worker's initializer raised (its cause)
        └── AllocationLostError               allocate(): the job stopped serving (also
                                              a NotServingError)

Each class also derives from the built-in exception callers already catch, so
``except TimeoutError`` or ``except concurrent.futures.BrokenExecutor`` keeps
working when code moves from the standard library to hpcfutures.
"""

from __future__ import annotations

import pickle
from concurrent.futures import BrokenExecutor
from typing import Any

__all__ = [
    "AllocationError",
    "AllocationLostError",
    "BrokenHPCExecutor",
    "ConfigurationError",
    "HPCFuturesError",
    "LaunchEndedError",
    "LauncherError",
    "MissingDependencyError",
    "NestedExecutorError",
    "NoSuitableWorkerError",
    "NotEnoughRanksError",
    "NotServingError",
    "QueueTimeoutError",
    "RemoteExceptionError",
    "SSHError",
    "SchedulerFileError",
    "SerializationError",
    "StartupTimeoutError",
    "StopTimeoutError",
    "TaskMemoryError",
    "TimeLimitError",
    "VersionMismatchError",
    "WorkerCrashError",
]


class HPCFuturesError(Exception):
    """Root of every error raised by hpcfutures itself."""


class ConfigurationError(HPCFuturesError, ValueError):
    """An option, environment variable or Dask config value is invalid."""


class NotEnoughRanksError(ConfigurationError):
    """The launch has fewer processes than the roles need."""


class LauncherError(HPCFuturesError, RuntimeError):
    """The launcher's environment is missing or inconsistent."""


class LaunchEndedError(HPCFuturesError, RuntimeError):
    """A second executor was created in a process whose launch has already ended.

    Under a launcher (``srun``, ``mpiexec``, ``hpcfutures run``...) one launch
    serves one executor: when the client leaves its ``with`` block (or calls
    ``shutdown()``) every other rank exits, so no process is left to serve a
    second one.  Keep the work of a launch inside one ``with`` block, or start
    a new launch.  The laptop default has no such limit.
    """


class NestedExecutorError(HPCFuturesError, RuntimeError):
    """An executor was created inside a task (or a process a task started).

    The task's process is a worker of the launch: an executor there would
    take that process for another rank of the launch, or start a cluster
    inside the worker.  Raised at once, naming the worker the task runs on.
    """


class MissingDependencyError(HPCFuturesError, ImportError):
    """A feature was asked for whose optional package is not installed.

    For example ``map(..., progress=True)`` without tqdm.  The message names
    the package and the ``pip install`` that brings it.
    """


class SchedulerFileError(HPCFuturesError, RuntimeError):
    """A scheduler file cannot be trusted: foreign launch, unsafe mode, bad content."""


class StartupTimeoutError(HPCFuturesError, TimeoutError):
    """Something a process waited for at start-up did not happen in time."""


class QueueTimeoutError(StartupTimeoutError):
    """A job that :func:`hpcfutures.allocate` submitted stayed queued past ``queue_timeout``.

    The job has been cancelled; the message says so and names it.
    """


class AllocationError(HPCFuturesError, RuntimeError):
    """The batch system refused a job (its own message is quoted), or cannot be asked."""


class StopTimeoutError(HPCFuturesError, TimeoutError):
    """A serving launch was asked to stop but did not confirm it before the deadline."""


class NotServingError(HPCFuturesError, ConnectionError):
    """No serving launch can be reached through a scheduler file.

    Raised by :func:`hpcfutures.connect` and :func:`hpcfutures.stop` when the
    file is missing (nothing was started, or not yet), marks a launch that has
    stopped, names an address where nobody answers (the job ended without
    cleaning up), or belongs to a launch that has its own client and does not
    accept others.  The message says which, and what to do.
    """


class VersionMismatchError(HPCFuturesError, RuntimeError):
    """The launch runs another Python minor version, or other versions of hpcfutures,
    distributed or cloudpickle, than the client (or a worker than its scheduler).

    Raised before the first call, naming both sides' versions.
    """


class SSHError(HPCFuturesError, ConnectionError):
    """The way to a cluster through ``ssh`` (``allocate(ssh=...)``, ``connect("host:path")``)
    failed: an unknown or changed host key, a refused login, a site that allows no
    port forwarding, or an SSH connection that broke.  The message quotes ssh and
    says whether anything was left running on the cluster."""


class SerializationError(HPCFuturesError, TypeError, pickle.PicklingError):
    """A call's function, arguments or result could not be pickled.

    It is a :class:`TypeError` (what hpcfutures documents) and a
    :class:`pickle.PicklingError` (what ``ProcessPoolExecutor`` users catch),
    so existing ``except`` clauses keep working.  Only that call's future
    fails; the executor stays usable.
    """


class RemoteExceptionError(HPCFuturesError, RuntimeError):
    """A call raised an exception that cannot be rebuilt where the client runs.

    Usually its class lives in a module that only the workers can import (a
    package installed on the cluster, a file beside the job's script there).
    This error stands in for it: ``type_name`` is the original class's
    qualified name (``module.Class``), ``message`` its text, and the worker's
    traceback is attached as ``__cause__`` as for any call's exception; its
    own text says why the original could not be rebuilt.  Make the module
    importable where the client runs to get the exception as itself.
    """

    def __init__(self, text: str, type_name: str = "", message: str = "") -> None:
        super().__init__(text)
        self.type_name = type_name
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.type_name, self.message), self.__dict__


class TaskMemoryError(MemoryError, HPCFuturesError):
    """A task would have taken its worker past the worker's memory limit.

    Only that task fails; the worker stays up and runs the next ones.
    (``MemoryError`` comes first so the exception can be unpickled on the
    client: its ``__new__`` must be ``MemoryError``'s.)
    """


class WorkerCrashError(HPCFuturesError, RuntimeError):
    """A call ended its worker's process: it exited, or died of a signal, while running it.

    Raised from that call's future only, within seconds: the other calls that
    were with it on the worker run again elsewhere, and the executor carries
    on with the remaining workers.  The message names the function, how the
    process ended (exit status, or signal) and where it ran; the worker's
    fatal-error report (the Python traceback of the crashing call, written by
    :mod:`faulthandler`) is attached as ``__cause__`` when there is one.

    Also raised for a call whose worker was lost (killed from outside, its
    node gone) more often than hpcfutures reruns such calls
    (:data:`attempts` says how often it was tried).

    Why not ``BrokenProcessPool``, what ``ProcessPoolExecutor`` raises for a
    crashed worker: that is a :class:`~concurrent.futures.BrokenExecutor`,
    which says the executor is unusable; here it is not.

    Attributes:
        function: The qualified name of the call's function.
        where: The worker it ran on ("rank 3 (worker) on node17").
        exit_status: The process's exit status, if it exited.
        signal: The name of the signal that ended it ("SIGSEGV"), if one did.
        attempts: How many workers were lost while running the call.
    """

    def __init__(self, message: str, function: str | None = None, where: str | None = None,
                 exit_status: int | None = None, signal: str | None = None,
                 attempts: int = 1) -> None:
        # Every field is an argument, so the error survives a pickle round trip.
        super().__init__(message, function, where, exit_status, signal, attempts)
        self.function = function
        self.where = where
        self.exit_status = exit_status
        self.signal = signal
        self.attempts = attempts

    def __str__(self) -> str:
        return str(self.args[0])


class NoSuitableWorkerError(HPCFuturesError, RuntimeError):
    """A call's needs (cores, GPUs, memory) fit no worker the launch still has or can
    still get: those that had them are gone (lost, or released as idle)."""


class TimeLimitError(HPCFuturesError, RuntimeError):
    """A call was never started: the allocation ends soon and the executor drained.

    Before the allocation's end (less the ``drain_margin``) the executor stops
    sending calls; those already running finish and their futures (and the
    journal) get their results.  Every call not started by then, and every
    call submitted later, fails with this one error.  Its message says when
    the allocation ends and who said so, how many results the journal holds,
    and how to resume: run the script again with the same ``journal=``
    (``requeue=True`` does that for a batch job).
    """


class BrokenHPCExecutor(HPCFuturesError, BrokenExecutor):
    """The executor lost its scheduler or all its workers and cannot run tasks.

    Also raised, as with ``ProcessPoolExecutor``'s ``BrokenProcessPool``, once a
    worker's ``initializer`` has raised: that exception is its ``__cause__``.
    """


class AllocationLostError(NotServingError, BrokenHPCExecutor):
    """The job behind an :func:`hpcfutures.allocate` executor stopped serving.

    It ended, was cancelled or reached its time limit while calls were
    outstanding.  Both a :class:`NotServingError` (what happened to the job,
    with its output file) and a :class:`BrokenHPCExecutor` (the executor
    cannot run tasks any more), so code written for either catches it.
    """


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


def _public_names() -> None:
    """Print the exported errors as ``hpcfutures.LauncherError``, where users import them.

    Tracebacks and ``repr`` use ``__module__``; pickle finds the classes there
    too (``hpcfutures`` re-exports every one of them).
    """
    for name in (*__all__, "RemoteTraceback"):
        globals()[name].__module__ = "hpcfutures"


_public_names()
