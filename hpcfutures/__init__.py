"""hpcfutures: an HPC allocation as a ``concurrent.futures`` Executor.

>>> import hpcfutures
>>> with hpcfutures.Executor() as ex:      # doctest: +SKIP
...     results = list(ex.map(simulate, range(1000)))

The same script runs on a laptop (local worker processes), under
``hpcfutures run -n 4``, ``srun`` or ``mpiexec``: each process negotiates a role
and only the client gets past ``__enter__``.

A launch started with ``hpcfutures serve`` has no client of its own: connect
to it from outside with :func:`connect`, and end it with :func:`stop`.

Map of the package (docs/architecture.rst draws it whole)::

    _facade/    the executor the user calls: submit/map -> batching -> bridge -> Future
    _launch/    a process's role in a launch: decided (plan, roles) and played
                (client_side, scheduler_side, worker_side, serving)
    launchers/  plug-ins: who am I (rank, size), where is the scheduler (file, MPI)
    _dask/      the one door to distributed's internals: scheduler, worker, client
    _remote/    around the user's function on a worker: calls, tracebacks, memory,
                the watcher that reports a worker a call killed
    _support/   config, the sync/async seam, logs, back-off, TLS credentials
    _reports/   the end-of-run summary and the dashboard line
    _cli/       the hpcfutures command (run.py: `hpcfutures run`, relay.py: its tagged output)
    _errors.py  every error, under HPCFuturesError
"""

from importlib import metadata as _metadata

from ._errors import (
    AllocationError,
    AllocationLostError,
    BrokenHPCExecutor,
    ConfigurationError,
    HPCFuturesError,
    LaunchEndedError,
    LauncherError,
    MissingDependencyError,
    NestedExecutorError,
    NoSuitableWorkerError,
    NotEnoughRanksError,
    NotServingError,
    QueueTimeoutError,
    RemoteExceptionError,
    RemoteTraceback,
    SchedulerFileError,
    SerializationError,
    SSHError,
    StartupTimeoutError,
    StopTimeoutError,
    TaskMemoryError,
    TimeLimitError,
    VersionMismatchError,
    WorkerCrashError,
)
from ._facade.core.tasks import Task, task
from ._facade.executor import Executor, LocalExecutor, MPIExecutor, SlurmExecutor
from ._facade.mpi.mpitask import MPITask, mpi_task
from ._facade.outside.allocate import AllocatedExecutor, allocate
from ._facade.outside.connect import ConnectedExecutor, connect, stop
from ._remote.gpus import current_gpus
from ._ssh.openssh import SSH
from .launchers import AddressExchange, Launcher, SchedulerInfo

try:
    __version__ = _metadata.version("hpcfutures")
except _metadata.PackageNotFoundError:  # pragma: no cover - a checkout that was never installed
    __version__ = "0+unknown"

# sorted() order, which the API test checks (ruff would put the all-capitals SSH first)
__all__ = [  # noqa: RUF022
    "AddressExchange",
    "AllocatedExecutor",
    "AllocationError",
    "AllocationLostError",
    "BrokenHPCExecutor",
    "ConfigurationError",
    "ConnectedExecutor",
    "Executor",
    "HPCFuturesError",
    "LaunchEndedError",
    "Launcher",
    "LauncherError",
    "LocalExecutor",
    "MPIExecutor",
    "MPITask",
    "MissingDependencyError",
    "NestedExecutorError",
    "NoSuitableWorkerError",
    "NotEnoughRanksError",
    "NotServingError",
    "QueueTimeoutError",
    "RemoteExceptionError",
    "RemoteTraceback",
    "SSH",
    "SSHError",
    "SchedulerFileError",
    "SchedulerInfo",
    "SerializationError",
    "SlurmExecutor",
    "StartupTimeoutError",
    "StopTimeoutError",
    "Task",
    "TaskMemoryError",
    "TimeLimitError",
    "VersionMismatchError",
    "WorkerCrashError",
    "allocate",
    "connect",
    "current_gpus",
    "mpi_task",
    "stop",
    "task",
]
