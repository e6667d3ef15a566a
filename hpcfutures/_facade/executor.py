"""The public executors: a ``concurrent.futures.Executor`` over an HPC launch.

Creating an executor negotiates this process's role (see :mod:`._session`).
Only the client process gets an executor it can use; on the other ranks the
constructor serves as scheduler or worker until the client is done and then
exits the process (or, with ``exit_when_done=False``, returns an executor
whose ``__enter__`` gives ``None``).
"""

from __future__ import annotations

import concurrent.futures as cf
import sys
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from .._errors import TimeLimitError
from .._launch.scheduler_side import expected_workers
from .._launch.session import Session
from .._remote.initializer import pack_initializer
from .._support.config import resolve_settings
from .._support.options import given
from ..launchers._schedfile import template_fields
from .bridge import TaskBridge, TaskFuture
from .core.arguments import refuse_foreign_futures
from .core.capacity import WorkerMemory
from .core.closing import Closer, exit_status_for, interpreter_exiting
from .core.tasks import check_fits, needs_of
from .maps import MapMethods
from .mpi.mpitask import MPITask, check_launch
from .resuming.draining import Drain
from .resuming.journal import Journal, open_journal

__all__ = ["Executor", "LocalExecutor", "MPIExecutor", "SlurmExecutor"]


class Executor(MapMethods, cf.Executor):
    """Run callables on the workers of an HPC launch, or on local processes.

    Args:
        max_workers: Worker processes of the laptop default. Under a launcher the workers are
            the ranks left after the scheduler and the client. Default: one per core.
            Environment: ``HPCFUTURES_MAX_WORKERS``.
        launcher: Force a launcher plug-in: a built-in name such as ``local`` (the laptop
            default), ``run`` (``hpcfutures run``), ``slurm`` or ``mpi`` (``hpcfutures info``
            and the docs list them all), or ``package.module:ClassName`` for your own. Default:
            detected from the environment. Environment: ``HPCFUTURES_LAUNCHER``.
        timeout: How long any start-up wait may take before a StartupTimeoutError. Seconds, or a
            duration such as ``"90s"``, ``"5min"`` or ``"1h"``. Default: ``60``. Environment:
            ``HPCFUTURES_TIMEOUT``.
        array_timeout: How long job-array elements wait for each other, since the queue may
            start them hours apart. Seconds, or a duration such as ``"90s"``, ``"5min"`` or
            ``"1h"``. Default: ``3600``. Environment: ``HPCFUTURES_ARRAY_TIMEOUT``.
        scheduler_file: Where the scheduler's address is exchanged: a path that may use
            ``{launch_id}``, ``{job_id}`` and ``{user}`` (under Slurm also ``{step_id}`` and
            ``{cluster}``). Default: ``~/.hpcfutures/scheduler-{launch_id}.json``. Environment:
            ``HPCFUTURES_SCHEDULER_FILE``.
        host: Address the scheduler and workers bind to. Default: loopback when the whole launch
            is on one host, else Dask's default. Environment: ``HPCFUTURES_HOST``.
        interface: Network interface to bind to instead of an address, e.g. ``ib0``. Default:
            none (see ``host``). Environment: ``HPCFUTURES_INTERFACE``.
        threads_per_worker: Threads in each Dask worker. Default: the launcher's CPUs per task,
            else 1. Environment: ``HPCFUTURES_THREADS_PER_WORKER``.
        memory_limit: Memory limit of each worker, checked when the settings are resolved.
            Bytes, or a size such as ``"4GiB"``; ``"auto"`` or a fraction such as ``0.5`` let
            Dask size it on the worker's host. Default: the worker's share of the job's memory
            request, else none. Environment: ``HPCFUTURES_MEMORY_LIMIT``.
        scheduler_in_client: Run the scheduler inside the client process, so no rank is spent on
            it. Default: ``False``. Environment: ``HPCFUTURES_SCHEDULER_IN_CLIENT``.
        security: TLS with per-launch credentials between all processes. False means plain TCP:
            anyone who can reach the scheduler's port can run code as you (only for trusted,
            single-user networks). Default: ``True``. Environment: ``HPCFUTURES_SECURITY``.
        exit_when_done: Non-client ranks exit the process when the client is done; if false,
            ``Executor()`` returns on them and ``__enter__`` gives ``None``. Default: ``True``.
            Environment: ``HPCFUTURES_EXIT_WHEN_DONE``.
        progress: Progress bar of ``Executor.map`` on stderr (needs tqdm): true or ``auto``
            draws it only when stderr is a terminal, so batch logs stay clean; ``always`` also
            into a file or pipe. ``map(..., progress=)`` overrides it per call. Default: off.
            Environment: ``HPCFUTURES_PROGRESS``.
        dashboard: Serve Dask's dashboard from the scheduler (needs bokeh); the client prints
            its address and an ``ssh -L`` tunnel command when it starts. Default: ``False``.
            Environment: ``HPCFUTURES_DASHBOARD``.
        dashboard_address: Where the dashboard listens, on the scheduler's host: loopback by
            default, reached through an ssh tunnel. A taken port is replaced by a free one.
            Default: ``'127.0.0.1:8787'``. Environment: ``HPCFUTURES_DASHBOARD_ADDRESS``.
        summary: When the client leaves the ``with`` block, print the calls run and failed, the
            calls re-run after a lost worker, each worker's busy time and the wall time.
            Default: ``False``. Environment: ``HPCFUTURES_SUMMARY``.
        log_dir: Directory where every rank also writes its own log file,
            ``<dir>/<launch_id>/rank-<rank>-<role>.log``. Default: none (only the tagged
            output). Environment: ``HPCFUTURES_LOG_DIR``.
        release_idle_after: After this long idle a worker retires and its rank exits 0, handing
            its CPUs and memory back while the launch goes on (useful when each worker is its
            own job-array element). Seconds, or a duration such as ``"90s"``, ``"5min"`` or
            ``"1h"``. Default: never. Environment: ``HPCFUTURES_RELEASE_IDLE_AFTER``.
        min_workers: Workers kept however idle they are, when ``release_idle_after`` is set.
            Default: ``1``. Environment: ``HPCFUTURES_MIN_WORKERS``.
        end_time: When the allocation ends, for a batch system hpcfutures cannot ask (it asks
            Slurm, Grid Engine, PBS and LSF itself); the executor drains before it. Epoch
            seconds, or an ISO time such as ``"2026-11-30T21:30:00"``. Default: asked of the
            batch system, else unknown. Environment: ``HPCFUTURES_END_TIME``.
        drain_margin: How long before the allocation's end the executor stops sending calls:
            running calls finish, calls never started fail with ``TimeLimitError``; ``0`` never
            drains (SIGTERM at the end stops the launch, as without a known end). Seconds, or a
            duration such as ``"90s"`` or ``"5min"``. Default: twice the longest measured call,
            at least 30 s. Environment: ``HPCFUTURES_DRAIN_MARGIN``.
        requeue: When the executor drained with calls left, put the batch job back in the queue
            (Slurm ``scontrol requeue``, Grid Engine exit status 99, PBS ``qrerun`` or, for
            users PBS refuses that, ``qsub`` of the job again, LSF ``brequeue``), so that a
            rerun resumes from the journal. Default: ``False``. Environment:
            ``HPCFUTURES_REQUEUE``.
        max_requeues: Runs in a row that recorded no new result, at most, before a job is no
            longer requeued: stops a job that never gets further from looping, and lets one
            whose every run adds results go on for as many runs as it needs (within the batch
            system's own cap, such as Slurm's ``MaxBatchRequeue``). Default: ``3``. Environment:
            ``HPCFUTURES_MAX_REQUEUES``.
        journal: Directory where each finished call's result is recorded, on a filesystem that
            later runs see; a later run with the same journal returns the recorded results
            instead of running those calls again. May use ``{job_id}`` and ``{user}`` like
            ``scheduler_file``. See the documentation's page on time limits and resuming.
            Default: none (nothing is recorded). Environment: ``HPCFUTURES_JOURNAL``.
        initializer: Called in every worker process before its first call, also in workers that
            join later, as ``initializer(*initargs)`` (as with ``ProcessPoolExecutor``). If it
            raises, the executor is broken: every pending and later call fails with
            ``BrokenHPCExecutor``, caused by that exception. Default: none. Only as a keyword
            argument (``HPCFUTURES_INITIALIZER`` is refused: a Python object is not text).
        initargs: The arguments of ``initializer``. Default: ``()``. Only as a keyword argument
            (``HPCFUTURES_INITARGS`` is refused: a Python object is not text).
    """

    _launcher_name: ClassVar[str | None] = None

    def __init__(
        self,
        # BEGIN generated: executor -- python -m hpcfutures._support.option_sources --write
        max_workers: int | None = None,
        *,
        launcher: str | None = None,
        timeout: float | str | None = None,
        array_timeout: float | str | None = None,
        scheduler_file: str | None = None,
        host: str | None = None,
        interface: str | None = None,
        threads_per_worker: int | None = None,
        memory_limit: int | float | str | None = None,
        scheduler_in_client: bool | None = None,
        security: bool | None = None,
        exit_when_done: bool | None = None,
        progress: bool | str | None = None,
        dashboard: bool | None = None,
        dashboard_address: str | None = None,
        summary: bool | None = None,
        log_dir: str | None = None,
        release_idle_after: float | str | None = None,
        min_workers: int | None = None,
        end_time: float | str | None = None,
        drain_margin: float | str | None = None,
        requeue: bool | None = None,
        max_requeues: int | None = None,
        journal: str | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple[Any, ...] | None = None,
        # END generated: executor
    ) -> None:
        explicit = given(locals())
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        settings = resolve_settings({**explicit, "launcher": launcher or self._launcher_name})
        if settings.initializer is not None:  # on every rank: the launch fails as one
            pack_initializer(settings.initializer, settings.initargs)
        self._session = self._new_session(settings)
        bridge = self._session.start(TaskBridge)
        self._bridge: TaskBridge | None = bridge if isinstance(bridge, TaskBridge) else None
        #: Drains before the allocation's end; requeues the job after it if asked.
        self._drain = None if self._bridge is None else Drain(self._bridge, settings).begin()
        #: Ends the launch: on shutdown, when this executor is lost, or at interpreter exit.
        self._closer = Closer(self._session, self._bridge, self)
        self._lock = self._closer.lock
        #: The result journal (journal=PATH), opened on first use: client only.
        self._journal: Journal | None = None
        self._journal_pending = self._bridge is not None and settings.journal is not None
        #: Needs (and rank counts) some worker was seen to meet: not asked again.
        self._needs_met: set[tuple[Any, int]] = set()

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
        if not self.is_client:
            return None
        try:
            with self._lock:
                self._journal_now()
        except BaseException:
            self._closer.close(1, wait=True, cancel_futures=True)
            raise
        return self

    def _journal_now(self) -> Journal | None:
        """The journal, opened the first time it is needed (call with the lock held)."""
        if self._journal_pending:
            assert self._bridge is not None
            template = str(self._session.settings.journal)
            self._journal = open_journal(template, template_fields(self._session.identity),
                                         self._bridge.call_soon)
            self._journal_pending = False
            self._closer.when_drained = self._journal_drained
            # What a drain's TimeLimitError says about the journal.
            journal = self._journal
            self._bridge.journal_note = lambda: (
                f"the journal {journal.directory} holds {journal.recorded_count()} results")
            self._bridge.journal_added = journal.recorded_now
        return self._journal

    def _journal_drained(self) -> None:
        assert self._journal is not None
        print(self._journal.close(), file=sys.stderr, flush=True)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        failed = exc is not None
        # Drained: the calls already running finish (their results reach their futures).
        drained = isinstance(exc, TimeLimitError)
        self._closer.close(exit_status_for(exc), wait=True, cancel_futures=failed,
                           abandon_maps=failed and not drained)
        requeued = None if self._drain is None else self._drain.requeue_if_wanted()
        if requeued is not None:
            raise SystemExit(requeued)
        return False

    # --------------------------------------------------------------- contract
    def _usable_bridge(self) -> TaskBridge:
        if self._bridge is None:
            raise RuntimeError(
                f"this process is the {self.role} of the launch, not its client: only the "
                "client rank can submit tasks"
            )
        if interpreter_exiting():
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        if self._closer.shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._bridge.broken is not None:
            raise self._bridge.broken
        if self._bridge.drained is not None:
            self._bridge.refused += 1
            raise self._bridge.drained
        return self._bridge

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> TaskFuture:
        """Schedule ``fn(*args, **kwargs)`` on a worker; return its future."""
        with self._lock:
            bridge = self._usable_bridge()
            refuse_foreign_futures(args, kwargs)
            if isinstance(fn, MPITask):  # one call over several ranks (mpicalls.py)
                check_launch(self._session, fn.ranks)
                self._check_needs(fn)
                return bridge.submit_mpi(fn, [(args, kwargs)])[0]
            self._check_needs(fn)
            journal = self._journal_now()
            if journal is not None:
                return journal.submit(bridge, fn, args, kwargs)
            return bridge.submit(fn, args, kwargs)

    def _check_needs(self, fn: Any) -> None:
        """``ValueError`` for a call that asks for more than any worker has (tasks.py)."""
        needs, count = (fn.needs or None, fn.ranks) if isinstance(fn, MPITask) else (
            needs_of(fn), 1)
        if needs is None or (needs, count) in self._needs_met:
            return
        bridge, settings = self._usable_bridge(), self._session.settings
        expected = self._expected_workers()

        def ask() -> tuple[list[dict[str, float]], int | None]:
            found = bridge.ask(_dask_worker_resources, settings.timeout)
            return list(found.values()), expected

        check_fits(needs, ask, settings.timeout, count)
        self._needs_met.add((needs, count))

    def _expected_workers(self) -> int | None:
        """How many workers the launch has when all have joined; None: not known."""
        settings, plan = self._session.settings, self._session.plan
        expected = None if plan is None else expected_workers(settings, plan, False)
        if plan is not None and expected is None:  # the laptop's local workers
            from ..launchers.local import available_cores

            expected = (settings.max_workers or plan.identity.local_workers
                        or available_cores())
        return expected

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
        """Finish the launch: every other rank stops once the submitted calls are done.

        As with ``ProcessPoolExecutor``: ``wait=False`` returns at once, yet the
        calls already submitted still run, their futures complete, and the
        interpreter waits for them before it exits.  ``cancel_futures=True``
        cancels the calls not started yet: ``submit`` calls still held on the
        client for bundling and ``map`` chunks not yet sent.  A call counts as
        started once its bundle or chunk is on its way to a worker (its future
        is then RUNNING); those finish.
        """
        self._closer.close(0, wait=wait, cancel_futures=cancel_futures)


def _dask_worker_resources(client: Any) -> Any:
    from .. import _dask

    return _dask.worker_resources(client)


class LocalExecutor(Executor):
    """The laptop default, forced: local worker processes, whatever the environment."""

    _launcher_name = "local"


class SlurmExecutor(Executor):
    """An executor whose roles come from Slurm (``srun``, ``sbatch``, job arrays)."""

    _launcher_name = "slurm"


class MPIExecutor(Executor):
    """An executor whose roles come from MPI's ``COMM_WORLD`` (``mpiexec``)."""

    _launcher_name = "mpi"
