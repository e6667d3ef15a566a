"""``hpcfutures.task(fn, cores=, gpus=, memory=)``: a call that says what it needs.

The wrapper is an ordinary picklable callable, so ``submit`` and ``map`` keep
their standard signatures: the executor reads its needs and sends its calls
with Dask resource restrictions (:mod:`.sending`); on the worker, calling it
takes the GPUs it asked for (:mod:`.._remote.gpus`) and calls the function.
What is checked at ``submit``, on the client's own thread, is here too: that
some worker of the launch has that much.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ..._support.needs import Needs, describe_resources, fits

__all__ = ["Task", "check_fits", "needs_of", "task"]


class Task:
    """A function with what each of its calls needs: made by :func:`hpcfutures.task`.

    Submit it to an executor as you would the function.  Called directly it
    calls the function (on a worker, with the GPUs it asked for).
    """

    __slots__ = ("__weakref__", "fn", "needs")
    fn: Callable[..., Any]
    needs: Needs

    def __init__(self, fn: Callable[..., Any], needs: Needs) -> None:
        if isinstance(fn, Task):  # task(task(f, gpus=1), cores=4): both said
            inner: Task = fn
            needs = Needs(needs.cores or inner.needs.cores, needs.gpus or inner.needs.gpus,
                          needs.memory or inner.needs.memory)
            fn = inner.fn
        if not callable(fn):
            raise TypeError(f"task() needs a callable, got {type(fn).__name__}")
        if isinstance(getattr(fn, "needs", None), Needs) and hasattr(fn, "ranks"):  # MPITask
            raise TypeError("task() got an mpi_task: give the needs of each rank to "
                            "mpi_task(fn, ranks=N, cores=..., gpus=..., memory=...)")
        self.fn = fn
        self.needs = needs

    @property
    def __name__(self) -> str:
        return getattr(self.fn, "__name__", "task")

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        """The function, for tools that name a call by it (inspect.unwrap too)."""
        return self.fn

    def __repr__(self) -> str:
        return f"task({getattr(self.fn, '__qualname__', self.fn)!r}, {self.needs})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Task):
            return NotImplemented
        return (self.fn, self.needs) == (other.fn, other.needs)

    def __hash__(self) -> int:
        return hash((Task, self.fn, self.needs))

    def __getstate__(self) -> tuple[Callable[..., Any], Needs]:
        return self.fn, self.needs

    def __setstate__(self, state: tuple[Callable[..., Any], Needs]) -> None:
        self.fn, self.needs = state

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        from ..._remote.gpus import holding

        with holding(self.needs.gpus or 0):
            return self.fn(*args, **kwargs)


def task(fn: Callable[..., Any] | None = None, *, cores: int | None = None,
         gpus: int | None = None, memory: int | str | None = None) -> Any:
    """Say what each call of ``fn`` needs; a wrapper, or a decorator without ``fn``.

    A call runs only on a worker that has that much free, and holds it while
    it runs: ``cores`` of the worker's threads, ``gpus`` GPUs of its own
    (which the call alone sees, through ``CUDA_VISIBLE_DEVICES`` or the
    vendor's variable, and :func:`hpcfutures.current_gpus`), ``memory`` (bytes
    or a size like ``"16GB"``) of its memory limit.  A call asking for more
    than any worker has fails at ``submit`` with ``ValueError``.  The needs
    count among the calls that state them: plain calls take a thread each, as
    always.  See docs/resources.rst.

    >>> ex.submit(hpcfutures.task(infer, gpus=1), batch)        # doctest: +SKIP
    >>> @hpcfutures.task(cores=8, memory="32GB")                # doctest: +SKIP
    ... def assemble(part): ...
    """
    needs = Needs.of(cores, gpus, memory)
    if fn is None:
        return functools.partial(Task, needs=needs)
    return Task(fn, needs)


def needs_of(fn: Any) -> Needs | None:
    """The needs of a :class:`Task` that states any, also inside ``functools.partial``
    (as many layers as there are); None for anything else."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, Task) and fn.needs:
        return fn.needs
    return None


def check_fits(needs: Needs, ask: Callable[[], tuple[list[dict[str, float]], int | None]],
               timeout: float, count: int = 1, patience: float = 0.05) -> None:
    """Refuse, at ``submit``, needs that no worker (``count`` workers) of the launch can meet.

    ``ask()`` returns the resources of the workers present and how many the
    launch expects (None: not known).  Needs that fit too few workers present
    are refused once every expected worker joined (or after ``timeout`` s, or
    at once where nothing is expected), with ``ValueError`` naming what was
    asked and what the largest worker has.
    """
    deadline = time.monotonic() + timeout
    while True:
        workers, expected = ask()
        if sum(fits(needs, have) for have in workers) >= count:
            return
        joined = len(workers) >= expected if expected is not None else bool(workers)
        if joined or time.monotonic() >= deadline:
            break
        time.sleep(min(patience, max(deadline - time.monotonic(), 0)))
        patience = min(patience * 2, 1.0)
    if not workers:
        raise ValueError(f"a call asks for {needs}, but this launch has no worker (yet): "
                         "nothing can run it")
    largest = max(workers, key=lambda have: sorted(have.items()))
    profiles = sorted({describe_resources(have) for have in workers})
    listed = "; ".join(profiles[:4]) + ("; ..." if len(profiles) > 4 else "")
    if count > 1 and any(fits(needs, have) for have in workers):
        raise ValueError(
            f"an MPI task asks for {count} ranks with {needs} each, but only "
            f"{sum(fits(needs, have) for have in workers)} worker(s) of this launch have "
            f"that much (the workers have: {listed}): ask for fewer ranks or less")
    raise ValueError(
        f"a call asks for {needs}, but no worker of this launch has that much: the largest "
        f"has {describe_resources(largest)} (the workers have: {listed}). Ask for at most "
        "what a worker has, or start workers that have more (--cpus-per-task, --gpus-per-task,"
        " --mem, or HPCFUTURES_GPUS where the launcher sets no GPUs)")
