"""The public executors: a ``concurrent.futures.Executor`` over an HPC launch.

Creating an executor negotiates this process's role (see :mod:`._session`).
Only the client process gets an executor it can use; on the other ranks the
constructor serves as scheduler or worker until the client is done and then
exits the process (or, with ``exit_when_done=False``, returns an executor
whose ``__enter__`` gives ``None``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

from .._launch.session import Session
from .._support.config import resolve_settings
from .arguments import refuse_foreign_futures
from .bridge import TaskBridge, TaskFuture
from .capacity import WorkerMemory
from .mapping import MapRun
from .progress import open_bar, progress_mode

__all__ = ["Executor", "LocalExecutor", "MPIExecutor", "SlurmExecutor"]


def exit_status_for(exc: BaseException | None) -> int:
    """The status the other ranks exit with when the client leaves with ``exc``."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


class Executor(cf.Executor):
    """Run callables on the workers of an HPC launch, or on local processes.

    Args:
        max_workers: Worker processes on the laptop default (default: one per
            core).  Under a launcher the number of workers is the number of
            ranks minus the scheduler and the client.
        launcher: Force a launcher plug-in: a built-in name such as ``"local"``,
            ``"slurm"``, ``"mpi"`` or ``"embedded"``, or ``"package.module:Class"``
            for your own; default: detect from the environment.
        timeout: Seconds every start-up wait may take (default 60).
        array_timeout: Seconds job-array elements wait for each other, since
            the queue may start them hours apart (default 3600).
        scheduler_file: Where the scheduler's address is exchanged; may use
            ``{launch_id}``, ``{job_id}`` and ``{user}`` (under Slurm also
            ``{step_id}`` and ``{cluster}``).
        host, interface: What the scheduler and workers bind to (default:
            loopback when the whole launch is on one host).
        threads_per_worker: Threads per Dask worker (default 1, or the
            launcher's CPUs per task).
        memory_limit: Memory limit per worker, e.g. ``"4GiB"``.
        scheduler_in_client: Run the scheduler inside the client process.
        security: TLS with per-launch credentials (default).  ``False`` means
            plain TCP: anyone who can reach the scheduler's port can run code
            as you.  Only for trusted, single-user networks.
        exit_when_done: On non-client ranks, exit the process when the client
            is done (default); if false, return and let ``__enter__`` give None.
        progress: Default progress bar of :meth:`map` (needs tqdm): ``False``
            (default), ``True`` (``"auto"``: only when stderr is a terminal,
            so batch logs stay clean) or ``"always"`` (also into a file).
        dashboard: Serve Dask's dashboard from the scheduler (needs bokeh);
            the client prints its address and an ``ssh -L`` command.
        dashboard_address: Where the dashboard listens on the scheduler's
            host (default ``"127.0.0.1:8787"``: loopback, through a tunnel).
        summary: When the client leaves the ``with`` block, print the calls
            run and failed, the calls re-run after a lost worker, each
            worker's busy time and the wall time.
        log_dir: Directory where every rank also writes its own log file,
            ``<dir>/<launch id>/rank-<rank>-<role>.log`` (also
            ``HPCFUTURES_LOG_DIR``); default: only the tagged output.
        release_idle_after: Seconds after which an idle worker retires and
            its rank exits 0, handing its CPUs and memory back to the cluster
            while the launch goes on (useful when each worker is its own
            job-array element); default: never.
        min_workers: Workers kept however idle they are (default 1).
    """

    _launcher_name: ClassVar[str | None] = None

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        launcher: str | None = None,
        timeout: float | None = None,
        array_timeout: float | None = None,
        scheduler_file: str | None = None,
        host: str | None = None,
        interface: str | None = None,
        threads_per_worker: int | None = None,
        memory_limit: str | int | None = None,
        scheduler_in_client: bool | None = None,
        security: bool | None = None,
        exit_when_done: bool | None = None,
        progress: bool | str | None = None,
        dashboard: bool | None = None,
        dashboard_address: str | None = None,
        summary: bool | None = None,
        log_dir: str | None = None,
        release_idle_after: float | None = None,
        min_workers: int | None = None,
    ) -> None:
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        settings = resolve_settings({
            "launcher": launcher or self._launcher_name,
            "max_workers": max_workers,
            "timeout": timeout,
            "array_timeout": array_timeout,
            "scheduler_file": scheduler_file,
            "host": host,
            "interface": interface,
            "threads_per_worker": threads_per_worker,
            "memory_limit": memory_limit,
            "scheduler_in_client": scheduler_in_client,
            "security": security,
            "exit_when_done": exit_when_done,
            "progress": progress,
            "dashboard": dashboard,
            "dashboard_address": dashboard_address,
            "summary": summary,
            "log_dir": log_dir,
            "release_idle_after": release_idle_after,
            "min_workers": min_workers,
        })
        self._lock = threading.Lock()
        self._shutdown = False
        self._map_runs: weakref.WeakSet[MapRun] = weakref.WeakSet()
        self._session = self._new_session(settings)
        self._bridge: TaskBridge | None = self._session.start()

    def _new_session(self, settings: Any) -> Session:
        """How this executor finds its cluster: by negotiating a role in the launch.

        :class:`~hpcfutures.ConnectedExecutor` overrides it to connect from outside.
        """
        return Session(settings)

    # ------------------------------------------------------------- properties
    @property
    def is_client(self) -> bool:
        """True in the process that runs the user's code and submits tasks."""
        return self._bridge is not None

    @property
    def role(self) -> str:
        """The role this process plays in the launch.

        One of ``"client"``, ``"scheduler"``, ``"worker"`` or ``"standalone"``.
        """
        return self._session.role.value

    # ---------------------------------------------------------------- context
    def __enter__(self) -> Executor | None:  # type: ignore[override]
        return self if self.is_client else None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._close(exit_status_for(exc), wait=True, cancel_futures=exc is not None)
        return False

    # --------------------------------------------------------------- contract
    def _usable_bridge(self) -> TaskBridge:
        if self._bridge is None:
            raise RuntimeError(
                f"this process is the {self.role} of the launch, not its client: only the "
                "client rank can submit tasks"
            )
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._bridge.broken is not None:
            raise self._bridge.broken
        return self._bridge

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> TaskFuture:
        """Schedule ``fn(*args, **kwargs)`` on a worker; return its future."""
        with self._lock:
            bridge = self._usable_bridge()
            refuse_foreign_futures(args, kwargs)
            return bridge.submit(fn, args, kwargs)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: float | None = None, chunksize: int = 1,
            progress: bool | str | None = None) -> Iterator[Any]:
        """Like :func:`map`, run on the workers; results come back in order.

        Items are grouped into Dask tasks adaptively (see :mod:`.batching`):
        ``chunksize`` is the smallest group, and tiny tasks are batched further
        as their durations become known.  The iterator raises ``TimeoutError``
        if a result is not ready ``timeout`` s after the call, and an item's
        exception at its position.

        ``progress`` (not in the standard library) overrides the executor's
        ``progress`` setting for this call: ``True`` draws a tqdm bar on
        stderr when it is a terminal, ``"always"`` draws it anyway, ``False``
        never.  Asking for a bar without tqdm installed raises
        :class:`~hpcfutures.MissingDependencyError`.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        mode = self._session.settings.progress if progress is None else progress_mode(progress)
        end_time = None if timeout is None else timeout + time.monotonic()
        items = list(zip(*iterables, strict=False))
        with self._lock:
            bridge = self._usable_bridge()
            bar = None if mode == "off" else open_bar(mode, len(items), fn)
            run = MapRun(bridge, fn, items, chunksize, progress=bar).start()
            self._map_runs.add(run)
        return run.results(end_time)

    def worker_memory_limits(self) -> dict[str, WorkerMemory]:
        """The memory each connected worker may use, by worker address.

        For tools that size work by memory (the Cubed integration checks its
        ``allowed_mem`` against ``per_task``): the workers' limits, not the
        client machine's.  Each value has ``limit`` (the worker's memory limit
        in bytes, None without one), ``threads``, ``host_share`` (its share of
        its host's memory), ``usable`` and ``per_task``.  Asks the scheduler
        each time; workers that have not joined yet are not listed.
        """
        with self._lock:
            bridge = self._usable_bridge()
        return bridge.worker_memory(self._session.settings.timeout)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Finish the launch: every other rank stops once pending work is done."""
        self._close(0, wait=wait, cancel_futures=cancel_futures)

    def _close(self, status: int, *, wait: bool, cancel_futures: bool) -> None:
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
        bridge = self._bridge
        if bridge is None:
            return
        runs = list(self._map_runs)
        if cancel_futures:
            for run in runs:
                run.cancel()
            bridge.cancel_all()
        if wait:
            for run in runs:
                run.finished.wait()
            cf.wait(bridge.outstanding())
        self._session.finish(status)


class LocalExecutor(Executor):
    """The laptop default, forced: local worker processes, whatever the environment."""

    _launcher_name = "embedded"


class SlurmExecutor(Executor):
    """An executor whose roles come from Slurm (``srun``, ``sbatch``, job arrays)."""

    _launcher_name = "slurm"


class MPIExecutor(Executor):
    """An executor whose roles come from MPI's ``COMM_WORLD`` (``mpiexec``)."""

    _launcher_name = "mpi"
