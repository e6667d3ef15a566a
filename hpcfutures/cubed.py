"""Cubed on an HPC allocation: a Cubed ``DagExecutor`` that runs on an hpcfutures executor.

::

    import cubed
    import cubed.array_api as xp
    import hpcfutures
    from hpcfutures.cubed import HPCFuturesDagExecutor

    with hpcfutures.Executor() as ex:           # srun -n 8 python job.py, or a laptop
        spec = cubed.Spec(work_dir="/scratch/me/cubed", allowed_mem="2GB",
                          executor=HPCFuturesDagExecutor(ex))
        a = xp.ones((4000, 4000), chunks=(1000, 1000), spec=spec)
        print(xp.sum(a).compute())              # as many compute() calls as you like

Who does what::

    cubed (client)         plan, memory projection, on_compute_start/end callbacks
      └─ execute_dag       this module: memory check, then cubed's async_map_dag,
           │               which fires on_operation_start/end and on_task_end
           └─ per task     executor.submit(run_cubed_task, ...)  ─> a worker rank
                           failed tasks are submitted again (``retries``)

Only this module imports Cubed, and ``import hpcfutures`` does not import
this module: Cubed is an optional extra (``pip install hpcfutures[cubed]``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import inspect
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cubed.runtime.asyncio import async_map_dag
from cubed.runtime.backup import use_backups_default
from cubed.runtime.types import Callback, DagExecutor
from cubed.runtime.utils import asyncio_run, execute_with_stats
from cubed.utils import memory_repr

from ._errors import ConfigurationError, RemoteTraceback
from ._facade.executor import Executor

__all__ = ["HPCFuturesDagExecutor", "run_cubed_task"]

logger = logging.getLogger("hpcfutures")

#: Options of the executor; each may also be passed to ``compute()``.
DEFAULTS: dict[str, Any] = {
    "retries": 2,                        # Cubed's default for its other executors
    "use_backups": None,                 # None: Cubed's rule (only on cloud storage)
    "batch_size": None,                  # None: submit every task of an operation at once
    "compute_arrays_in_parallel": None,  # None/False: one operation at a time
    "check_memory": True,                # compare allowed_mem with the workers' memory
}


class HPCFuturesDagExecutor(DagExecutor):  # type: ignore[misc,unused-ignore]  # typed from cubed 0.28
    """Runs Cubed plans on the workers of an hpcfutures executor.

    Pass it to ``cubed.Spec(executor=...)`` (or to ``compute(executor=...)``).
    The hpcfutures executor is only borrowed: it is never shut down here, so
    one allocation serves every ``compute()`` of the script, and the ``with``
    block that opened the executor decides when the launch ends.

    Args:
        executor: The executor tasks go to: an open ``hpcfutures.Executor``.
            Other ``concurrent.futures`` executors work if they can run
            closures (a ``ThreadPoolExecutor`` can, a ``ProcessPoolExecutor``
            cannot: it pickles without cloudpickle); they are not
            memory-checked.
        retries: How many times a failed task is submitted again before the
            computation fails with its exception (Cubed's convention: 2).
            Retries are new tasks, so they may run on another worker.
        use_backups: Launch a second copy of a straggling task.  Default:
            Cubed's rule, which enables it only for cloud object stores,
            because a backup may write the same chunk concurrently.
        batch_size: Submit at most this many tasks of an operation at once
            (default: all).  Bounds the client's memory for huge operations.
        compute_arrays_in_parallel: Run independent operations concurrently.
        check_memory: Before each computation, check that every worker can
            give each of its threads ``spec.allowed_mem`` bytes.
    """

    def __init__(self, executor: cf.Executor, *, retries: int = 2,
                 use_backups: bool | None = None, batch_size: int | None = None,
                 compute_arrays_in_parallel: bool | None = None,
                 check_memory: bool = True) -> None:
        if not isinstance(executor, cf.Executor):
            raise TypeError(
                f"HPCFuturesDagExecutor needs an open executor such as hpcfutures.Executor(), "
                f"not {executor!r} (on ranks other than the client, `with Executor() as ex` "
                "gives None: build the Cubed spec inside the with block)")
        options = _validated({"retries": retries, "use_backups": use_backups,
                              "batch_size": batch_size,
                              "compute_arrays_in_parallel": compute_arrays_in_parallel,
                              "check_memory": check_memory})
        # cubed 0.28 leaves DagExecutor.__init__ unannotated; 0.27 ships no types at all
        super().__init__(**options)  # type: ignore[no-untyped-call,unused-ignore]
        self.executor = executor

    @property
    def name(self) -> str:
        return "hpcfutures"

    def __eq__(self, other: object) -> bool:
        # Cubed compares specs (hence executors) to refuse mixing arrays from
        # different specs in one computation: two executors are only equal
        # when they would send the tasks to the same place.
        return (isinstance(other, HPCFuturesDagExecutor) and other.executor is self.executor
                and other.kwargs == self.kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # The spec travels to the workers inside Cubed's task closures, and
        # with it this object; an open executor (locks, threads, sockets)
        # cannot travel, and is not needed there: workers run tasks, not plans.
        return (_detached, (self.kwargs,))

    def __repr__(self) -> str:
        return f"HPCFuturesDagExecutor({self.executor!r}, {self.kwargs})"

    def execute_dag(self, dag: Any, callbacks: Sequence[Callback] | None = None,
                    resume: bool | None = None, spec: Any = None,
                    compute_id: str | None = None, **kwargs: Any) -> None:
        """Run every operation of ``dag`` on the executor's workers (Cubed calls this)."""
        if self.executor is None:
            raise RuntimeError("this HPCFuturesDagExecutor was unpickled away from its "
                               "executor; run compute() in the script that opened it")
        options = _validated({**self.kwargs, **kwargs})
        if spec is not None:
            if options["check_memory"]:
                check_worker_memory(self.executor, spec.allowed_mem)
            if options["use_backups"] is None:
                options["use_backups"] = use_backups_default(spec)
        extra = {"resume": resume} if _accepts("resume") else {}
        asyncio_run(async_map_dag(
            _futures_maker(self.executor, options["retries"]),
            dag=dag,
            callbacks=callbacks,
            compute_arrays_in_parallel=options["compute_arrays_in_parallel"],
            use_backups=bool(options["use_backups"]),
            batch_size=options["batch_size"],
            compute_id=compute_id,
            **extra,
        ))


def _detached(options: dict[str, Any]) -> HPCFuturesDagExecutor:
    """An unpickled HPCFuturesDagExecutor: same options, no executor to run on."""
    copy = HPCFuturesDagExecutor.__new__(HPCFuturesDagExecutor)
    DagExecutor.__init__(copy, **options)
    copy.executor = None  # type: ignore[assignment]
    return copy


def _validated(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"HPCFuturesDagExecutor got unknown option(s) {', '.join(unknown)}; "
                        f"it accepts {', '.join(DEFAULTS)}")
    merged = {**DEFAULTS, **options}
    retries, batch_size = merged["retries"], merged["batch_size"]
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0, not {retries!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or an integer >= 1, not {batch_size!r}")
    return merged


def _accepts(parameter: str) -> bool:
    """Whether this Cubed's ``async_map_dag`` takes ``parameter`` (it varies by version)."""
    return parameter in inspect.signature(async_map_dag).parameters


# ------------------------------------------------------------ memory check
def check_worker_memory(executor: cf.Executor, allowed_mem: int | None) -> None:
    """Refuse to start if some worker cannot give each task ``allowed_mem`` bytes.

    Cubed's own executors compare ``allowed_mem`` with the machine they run
    on; on an allocation the tasks run elsewhere, so the workers are asked
    (:meth:`hpcfutures.Executor.worker_memory_limits`).  Executors that cannot
    say, and workers whose memory is unknown, are not checked.
    """
    ask = getattr(executor, "worker_memory_limits", None)
    if not allowed_mem or ask is None:
        return
    known = {address: memory for address, memory in ask().items() if memory.usable}
    if not known:
        return
    address, tightest = min(known.items(), key=lambda item: item[1].per_task)
    if tightest.per_task >= allowed_mem:
        return
    where = (f"its memory limit of {_size(tightest.limit)}" if tightest.limit else
             f"its share of its host's memory, {_size(tightest.host_share)}")
    raise ConfigurationError(
        f"cubed.Spec(allowed_mem={_size(allowed_mem)}) is more than worker {address} can "
        f"give one task: {_size(tightest.per_task)} ({where}, over {tightest.threads} "
        "thread(s)). Lower allowed_mem, or give each worker more memory (memory_limit=, "
        "HPCFUTURES_MEMORY_LIMIT, a larger --mem/--mem-per-cpu) or fewer threads "
        "(threads_per_worker=, --cpus-per-task)")


def _size(n: int | None) -> str:
    """Bytes the way Cubed writes them (decimal units, as in ``allowed_mem="2GB"``)."""
    text: str = memory_repr(n or 0)
    return text


# -------------------------------------------------------------- the tasks
def run_cubed_task(function: Any, item: Any, config: Any) -> tuple[Any, dict[str, Any]]:
    """One Cubed task, on a worker: its result and the timings Cubed's callbacks report."""
    outcome: tuple[Any, dict[str, Any]] = execute_with_stats(function, item, config=config)
    return outcome


def _futures_maker(executor: cf.Executor, retries: int) -> Callable[..., Any]:
    """The ``create_futures_func`` Cubed's ``async_map_dag`` calls per batch of inputs."""

    def create_futures(inputs: Iterable[Any], *, func: Any, config: Any,
                       name: str | None = None,
                       compute_id: str | None = None) -> list[tuple[Any, asyncio.Future[Any]]]:
        made: list[tuple[Any, asyncio.Future[Any]]] = []
        for item in inputs:
            task = asyncio.ensure_future(
                _with_retries(executor, func, item, config, retries, name))
            task.add_done_callback(_seen)
            made.append((item, task))
        return made

    return create_futures


def _seen(task: asyncio.Future[Any]) -> None:
    """Mark a task's exception as retrieved.

    When a computation fails, Cubed raises the first error and drops the
    other finished tasks; asyncio would then print "Task exception was never
    retrieved" for each of them when the interpreter exits.
    """
    if not task.cancelled():
        task.exception()


async def _with_retries(executor: cf.Executor, func: Any, item: Any, config: Any,
                        retries: int, name: str | None) -> Any:
    """Submit the task; submit it again after a failure, at most ``retries`` times.

    Only failures of the task itself are retried (see :func:`_worth_retrying`).
    Cancelling the returned awaitable (Cubed does so for the loser of a
    backup race, and for everything left when a computation fails) cancels
    the task on the cluster too.
    """
    for attempt in itertools.count(1):
        future = executor.submit(run_cubed_task, func, item, config)
        try:
            return await asyncio.wrap_future(future)
        except Exception as err:
            if attempt > retries or not _worth_retrying(executor, err):
                raise
            logger.warning("cubed task %s of %s failed (%s: %s); submitting it again "
                           "(retry %d of %d)", item, name or "an operation",
                           type(err).__name__, err, attempt, retries)
    raise AssertionError("unreachable")  # pragma: no cover


def _worth_retrying(executor: cf.Executor, err: BaseException) -> bool:
    """Whether submitting the task again might help.

    Not when the executor is broken, nor, on hpcfutures, when the task never
    ran: a task that could not be sent (it cannot be pickled) fails the same
    way every time.  hpcfutures marks failures that happened on a worker with
    the remote traceback as ``__cause__``.  (A worker that died mid-task is
    handled below us: Dask runs its tasks again on the other workers.)
    """
    if isinstance(err, cf.BrokenExecutor):
        return False
    if isinstance(executor, Executor):
        return isinstance(err.__cause__, RemoteTraceback)
    return True
