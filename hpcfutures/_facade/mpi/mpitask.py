"""``hpcfutures.mpi_task(fn, ranks=N)``: one call spread over N worker ranks.

The wrapper is an ordinary picklable object, so ``submit`` and ``map`` keep
their standard signatures; the executor recognises it and sends the call
through :mod:`.mpicalls` instead of the batching engine.  What it checks at
``submit``, on the client's own thread, is here: that the launch has an MPI
world, and enough worker ranks.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..._errors import LauncherError
from ..._support.needs import Needs

__all__ = ["MPITask", "check_launch", "mpi_task", "results_in_order"]


class MPITask:
    """A function to run as one MPI program over ``ranks`` worker ranks.

    Made by :func:`hpcfutures.mpi_task`; submit it to an executor as you would
    the function.  Calling it directly is an error: it needs a communicator
    that only the executor can build.
    """

    __slots__ = ("fn", "needs", "ranks")

    def __init__(self, fn: Callable[..., Any], ranks: int, needs: Needs | None = None) -> None:
        if isinstance(fn, MPITask):
            raise TypeError("mpi_task() got a function that is already an mpi_task")
        if not callable(fn):
            raise TypeError(f"mpi_task() needs a callable, got {type(fn).__name__}")
        if isinstance(ranks, bool) or not isinstance(ranks, int):
            raise TypeError(f"ranks must be an int, got {type(ranks).__name__}")
        if ranks < 1:
            raise ValueError(f"ranks must be at least 1, got {ranks}")
        self.fn = fn
        self.ranks = ranks
        #: What each rank needs (cores, GPUs, memory): its workers are chosen to have it.
        self.needs = needs or Needs()

    @property
    def __name__(self) -> str:
        return getattr(self.fn, "__name__", "mpi_task")

    def __repr__(self) -> str:
        needs = f", {self.needs}" if self.needs else ""
        return f"mpi_task({getattr(self.fn, '__qualname__', self.fn)!r}, ranks={self.ranks}{needs})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MPITask):
            return NotImplemented
        return (self.fn, self.ranks, self.needs) == (other.fn, other.ranks, other.needs)

    def __hash__(self) -> int:
        return hash((MPITask, self.fn, self.ranks, self.needs))

    def __getstate__(self) -> tuple[Callable[..., Any], int, Needs]:
        return self.fn, self.ranks, self.needs

    def __setstate__(self, state: tuple) -> None:
        self.fn, self.ranks, self.needs = (*state, Needs())[:3]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self!r} runs only when submitted to an hpcfutures executor "
                        "(ex.submit(task, ...) or ex.map(task, ...)), which gives it its "
                        "communicator")


def mpi_task(fn: Callable[..., Any], ranks: int, *, cores: int | None = None,
             gpus: int | None = None, memory: int | str | None = None) -> MPITask:
    """Wrap ``fn`` so that an executor runs each call on ``ranks`` worker ranks together.

    ``cores``, ``gpus`` and ``memory`` are what each of those ranks needs, as
    with :func:`hpcfutures.task`: the call waits for ``ranks`` free workers
    that have that much, and each member holds it while it runs.

    Each call runs ``fn(comm, *args, **kwargs)`` on ``ranks`` distinct worker
    ranks at once, ``comm`` being an mpi4py communicator of just those ranks,
    made for this call and freed after it.  The future's result is what
    ``comm`` rank 0 returned; an exception on any member is raised on the
    client with its own type, naming the member rank.  Needs a launch with an
    MPI world: ``mpiexec`` or ``srun --mpi=pmi2``.

    >>> def total(comm, x):                                   # doctest: +SKIP
    ...     return comm.allreduce(x * comm.rank)
    >>> ex.submit(hpcfutures.mpi_task(total, ranks=4), 2).result()   # doctest: +SKIP
    12
    """
    return MPITask(fn, ranks, Needs.of(cores, gpus, memory))


def check_launch(session: Any, ranks: int) -> int:
    """Refuse, at ``submit``, an MPI task this launch cannot run; else its worker ranks.

    ``LauncherError`` where there is no MPI world of worker ranks (the laptop,
    ``hpcfutures run``, ``srun`` without ``--mpi``, a client from outside),
    ``ValueError`` when it has fewer worker ranks than asked for.
    """
    from ..._launch.roles import Role
    from ..._launch.scheduler_side import expected_workers

    plan = session.plan
    launcher = plan.identity.launcher if plan is not None else "unknown"
    if plan is None or launcher != "mpi" or plan.role is not Role.CLIENT:
        how = ("a single process with local worker processes" if plan is not None
               and plan.role is Role.STANDALONE else f"the {launcher!r} launcher")
        raise LauncherError(
            f"an MPI task needs the workers to be ranks of one MPI world, but this launch has "
            f"none ({how}): start the script with mpiexec -n <N> python script.py, or under "
            "Slurm with srun --mpi=pmi2 -n <N> python script.py (MPI chooses the roles then)")
    workers = expected_workers(session.settings, plan, keep_serving=False) or 0
    if ranks > workers:
        raise ValueError(
            f"the MPI task asks for {ranks} ranks, but this launch has only {workers} worker "
            f"rank(s) ({plan.identity.size} processes, less the scheduler and the client): "
            f"ask for at most {workers}, or start more processes")
    return int(workers)


def results_in_order(futures: Sequence[cf.Future], end_time: float | None) -> Iterator[Any]:
    """The results of ``futures`` in order, as ``Executor.map`` yields them.

    ``TimeoutError`` once ``end_time`` (``time.monotonic()``) passes before a
    result is ready; the futures not yet yielded are cancelled when the
    iterator is closed or raises.
    """
    pending = list(reversed(futures))
    try:
        while pending:
            future = pending[-1]
            value = future.result(None if end_time is None else end_time - time.monotonic())
            pending.pop()
            yield value
    finally:
        for future in pending:
            future.cancel()
