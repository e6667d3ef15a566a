"""Sending hpcfutures tasks to Dask: keys, dependencies, one message per batch.

Runs on the client's loop thread only: the Dask client is not thread-safe
(from another thread its methods turn into blocking calls into the loop).
Tasks queued together go as one graph per runner (one ``update-graph``
message, not one per task), however many: a large launch's first round sent
as smaller graphs gets its first result sooner but makes the whole first map
slower (``benchmarks/scale-history.rst``, "The first round").  If
something in a batch cannot be pickled, each task is sent alone, so that
only the culprit fails.

With the end-of-run summary on, each task carries the number of user calls it
stands for as a Dask annotation (:data:`~.._reports.summary.CALLS_ANNOTATION`),
which the scheduler's ledger reads; tasks of one call carry nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import logging
import types
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ..._remote.calls import Rows, pick, run_bundle, run_chunk_task, run_task
from ..._remote.carried import Carried, Slot, carried, uncarried
from ..._remote.modules import to_ship
from ..._remote.shipping import ShippedFunction
from ..._reports.summary import CALLS_ANNOTATION
from ..._support.loop import loop_thread_only
from .arguments import swap_futures
from .engine import Engine
from .futures import TaskFuture, settle
from .tasks import needs_of
from .unsendable import submission_error, unpicklable_part

__all__ = ["Sender"]

logger = logging.getLogger("hpcfutures")


class _NotSentYet(Exception):
    """A future used as an argument is still waiting in the submission queue."""


class _Value:
    """A done argument's value that no task on the cluster holds: it travels in the
    box of the call that takes it, as the call's other arguments do."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _ArgumentFailed(Exception):
    """A future used as an argument failed: its dependent fails with its error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


class Sender:
    """Names tasks, swaps dependencies for Dask futures and sends them (loop thread).

    Args:
        client: The Dask client.
        engine: The engine (the bridge) it is part of: its completions settle a
            future when its task ends (``completions.follow``); it sends a call still
            held for bundling at once (``send_held_now``: it became an argument),
            and says whether the launch is ``small``
            (``batching.small_launch``).
    """

    def __init__(self, client: Any, engine: Engine) -> None:
        self._client = client
        self._engine = engine
        #: Every task key starts so; small results come on its express topic
        #: (``_dask/express.py``).
        self.key_prefix = f"hpcf-{uuid.uuid4().hex[:8]}-"
        self._counter = itertools.count()
        #: Annotate tasks with their call counts (only for the end-of-run summary).
        self.count_calls = False

    def _key(self, name: str) -> str:
        return f"{self.key_prefix}{name}-{next(self._counter)}"

    def _counted(self, calls: int) -> contextlib.AbstractContextManager:
        """Annotate the tasks made inside with ``calls`` (summary on).

        Wrap the client's call and nothing else: a coroutine started inside
        would copy the annotation into its context and pass it on to every
        task sent from there.
        """
        if not self.count_calls or calls == 1:
            return contextlib.nullcontext()
        import dask  # imported by the client already; here only when counting

        return dask.annotate(**{CALLS_ANNOTATION: calls})

    # ------------------------------------------------------------- batches
    @loop_thread_only
    def send_queued(self, items: list[tuple]) -> None:
        """Send ``(future, runner, fn, args, kwargs, depends)`` items, in order."""
        groups: dict[tuple, list] = {}
        for future, runner, fn, args, kwargs, depends in items:
            if future.done():
                continue
            # Kept until it is done: to send it again if its worker dies (recovery.py).
            future._call.sending((runner, fn, args, kwargs, depends))
            # One graph per runner and needs; per call count too when counts are annotated.
            calls = _calls_in(args[0]) if runner is run_chunk_task and self.count_calls else 1
            if depends:
                resolved = self._resolve_or_settle(future, runner, fn, args, kwargs)
                if resolved is _NotSentYet:
                    # A dependency is queued in this very batch: send what came before it.
                    self._send_groups(groups)
                    groups = {}
                    resolved = self._resolve_or_settle(future, runner, fn, args, kwargs,
                                                       last_try=True)
                if resolved is None:
                    continue
                args, kwargs = resolved
            else:
                if runner is run_chunk_task and not isinstance(args[0], Rows):
                    args = (Rows(args[0]),)  # no future inside: a box of its own
                args, kwargs = carried(args, kwargs)  # Dask never reads the arguments
            name = getattr(fn, "__name__", "task")
            groups.setdefault((runner, calls, needs_of(fn)), []).append(
                (future, fn, args, kwargs, self._key(name)))
        self._send_groups(groups)

    def _send_groups(self, groups: dict[tuple, list]) -> None:
        for (runner, calls, needs), group in groups.items():
            self._send(runner, group, calls, None if needs is None else needs.resources())

    def _send(self, runner: Callable[..., Any], group: list, calls: int,
              resources: dict[str, float] | None = None) -> None:
        shipped = _shipped_functions((fn for _, fn, *_ in group), to_ship(self._client))
        columns = zip(*[(shipped.get(id(fn), fn), args, kwargs)
                        for _, fn, args, kwargs, _ in group], strict=True)
        try:
            with self._counted(calls):
                dask_futures = self._client.map(runner, *columns, **_restricted(resources),
                                                key=[key for *_, key in group], pure=False)
        except Exception:
            dask_futures = [self._send_one(runner, item, calls) for item in group]
        for (future, *_), dask_future in zip(group, dask_futures, strict=False):
            if dask_future is not None:
                future._call.sent(dask_future)
                self._engine.completions.follow(dask_future, future)

    def _send_one(self, runner: Callable[..., Any], item: tuple, calls: int = 1) -> Any:
        future, fn, args, kwargs, key = item
        shipped = _shipped_functions([fn], to_ship(self._client)).get(id(fn), fn)
        try:
            # A fresh key: Dask already registered the failed batch's keys and
            # would hand back those never-to-finish futures.
            with self._counted(calls):
                return self._client.submit(runner, shipped, args, kwargs,
                                           key=f"{key}-alone", **_restricted(_resources_of(fn)),
                                           pure=False)
        except Exception as err:
            settle(future, exception=submission_error(
                fn, err, unpicklable_part(runner, fn, *uncarried(args, kwargs))))
            return None

    # ------------------------------------------------------ single tasks
    @loop_thread_only
    def launch_internal(self, runner: Callable[..., Any], args: tuple, name: str,
                        calls: int = 1, expect: float | None = None) -> TaskFuture | None:
        """Send one task of the library's own (a bundle: ``expect`` is the seconds its
        calls were expected to take each); None if it cannot be pickled."""
        key = self._key(name)
        resources = _bundle_resources(args)  # read before the functions are shipped
        sent = args
        if runner is run_bundle:  # its calls' functions travel as a batch's do
            # With the summary on, the scheduler counts a bundle's calls where it ran
            # (its annotation): such a bundle's worker gives none of them back.  On a
            # large launch its finished calls do not travel ahead (batching.small_launch).
            args = (self._shipped_calls(args[0]), not self.count_calls, self._engine.small(),
                    expect)
            sent = (Carried(args[0], {}), *args[1:])  # and Dask never reads the calls
        try:
            with self._counted(calls):
                dask_future = self._client.submit(runner, *sent, key=key, pure=False,
                                                  **_restricted(resources))
        except Exception:
            logger.debug("could not send %s as one task", key, exc_info=True)
            return None
        internal = TaskFuture()
        # A bundle's recipe has no keyword arguments: its slot keeps the restrictions.
        internal._call.sent(dask_future, (runner, None, args, _restricted(resources), False))
        self._engine.completions.follow(dask_future, internal)
        return internal

    def _shipped_calls(self, calls: list) -> list:
        """A bundle's ``(fn, args, kwargs)`` calls with each function shipped once.  The
        list travels in one :class:`Carried` box (one object for the bundle: a box per
        call adds a pickle per call, on the client and again on the scheduler)."""
        shipped = _shipped_functions((fn for fn, *_ in calls), to_ship(self._client))
        return [(shipped.get(id(fn), fn), *rest) for fn, *rest in calls]

    @loop_thread_only
    def resend(self, future: TaskFuture, recipe: tuple) -> None:
        """Send ``future``'s group again, as ``recipe`` says (its worker died under it)."""
        runner, fn, args, kwargs, depends = recipe
        call = future._call
        call.drop_task()
        if runner is not run_bundle:
            self.send_queued([(future, runner, fn, args, kwargs, depends)])
            return
        for member in call.members or ():
            member._call.drop_task()  # a pick from the lost bundle: made again on demand
        key = self._key("bundle")
        try:
            with self._counted(len(args[0])):
                dask_future = self._client.submit(runner, Carried(args[0], {}), *args[1:],
                                                  key=key, pure=False,
                                                  **kwargs)  # the restrictions, if any
        except Exception as err:
            settle(future, exception=err)
            return
        call.sent(dask_future, recipe)
        self._engine.completions.follow(dask_future, future)

    @loop_thread_only
    def launch_alone(self, future: TaskFuture, fn: Callable[..., Any], args: tuple,
                     kwargs: dict) -> None:
        """Send one user call as its own Dask task (its failure stays its own)."""
        key = self._key(getattr(fn, "__name__", "task"))
        future._call.sending((run_task, fn, args, kwargs, False))
        dask_future = self._send_one(run_task, (future, fn, *carried(args, kwargs), key))
        if dask_future is not None:
            future._call.sent(dask_future)
            self._engine.completions.follow(dask_future, future)

    # ------------------------------------------------------- dependencies
    def _resolve_or_settle(self, future: TaskFuture, runner: Callable[..., Any],
                           fn: Callable[..., Any], args: tuple, kwargs: dict,
                           last_try: bool = False) -> Any:
        """(args, kwargs) as Dask is given them (:func:`carried`: a box with a slot for
        each dependency, the dependencies' Dask futures beside it, and in place the
        value of a done argument that no task holds); ``_NotSentYet``; or None once
        ``future`` failed because a dependency cannot be had."""
        dependencies: list = []

        def slot(future: cf.Future) -> Any:
            handle = self._dask_handle(future)
            if isinstance(handle, _Value):
                return handle.value
            dependencies.append(handle)
            return Slot(len(dependencies) - 1)

        try:
            # For a chunk, args == (chunk,): a list of argument tuples.
            boxed = swap_futures(args, slot), swap_futures(kwargs, slot)
            return carried(*boxed, dependencies)
        except _ArgumentFailed as failed:
            settle(future, exception=failed.error)
            return None
        except _NotSentYet:
            if not last_try:
                return _NotSentYet
            err = RuntimeError("a future passed as an argument was never sent (it belongs "
                               "to an executor that is not running)")
            settle(future, exception=err)
            return None
        except Exception as err:
            settle(future, exception=submission_error(fn, err))
            return None

    def _dask_handle(self, future: cf.Future) -> Any:
        """The Dask future standing for ``future``'s result, made on demand; for a
        done call that no task on the cluster holds, its value (:class:`_Value`)."""
        if not isinstance(future, TaskFuture):
            return future  # another executor's, inside a map item: fails as unpicklable
        call = future._call
        if call.dask is not None:
            return call.dask
        if future.cancelled():
            raise cf.CancelledError("a future passed as an argument was cancelled")
        if call.bundle is None and not future.done():
            self._engine.send_held_now(future)
        if call.bundle is not None:
            bundle, index = call.bundle
            if bundle._call.dask is None and future.done():
                # Its bundle's task is gone for good (sending it again failed).
                return _done_value(future)
            with self._counted(0):  # picks a value, runs no call
                call.sent(self._client.submit(pick, bundle._call.dask, index,
                                              key=self._key("pick"), pure=False))
            return call.dask
        if future.done():
            # Done with no task of its own: cut loose from a lost one, or failed
            # before it was sent.
            return _done_value(future)
        raise _NotSentYet


def _done_value(future: cf.Future) -> _Value:
    """A done argument that no task on the cluster holds: its value travels with its
    dependent; its error (an unpicklable function, say) becomes the dependent's own,
    as Dask fails a task whose dependency failed."""
    error = future.exception()
    if error is not None:
        raise _ArgumentFailed(error)
    return _Value(future.result())


def _resources_of(fn: Any) -> dict[str, float] | None:
    """Dask's resource restrictions for a call of ``fn`` (a task that states needs)."""
    needs = needs_of(fn)
    return None if needs is None else needs.resources()


def _restricted(resources: dict[str, float] | None) -> dict[str, Any]:
    """Dask's keyword for resource restrictions; nothing at all for plain calls."""
    return {"resources": resources} if resources else {}


def _bundle_resources(args: tuple) -> dict[str, float] | None:
    """A bundle's restrictions: its calls are of one function (bundles.py)."""
    calls = args[0] if args else None
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], tuple):
        return None
    return _resources_of(calls[0][0])


def _calls_in(chunk: list | Rows) -> int:
    return len(chunk.items if isinstance(chunk, Rows) else chunk)


def _shipped_functions(functions: Iterable[Callable[..., Any]],
                       by_value: list[types.ModuleType]) -> dict[int, ShippedFunction]:
    """A batch's distinct functions, each pickled once for all its tasks (see
    ``_remote/shipping.py``), with the user's modules the workers lack by value.  One
    that cannot be pickled is left as it is: Dask's attempt fails, and the error says
    which function (``_submission_error``)."""
    shipped: dict[int, ShippedFunction] = {}
    unpicklable: set[int] = set()
    for fn in functions:
        if id(fn) not in shipped and id(fn) not in unpicklable:
            try:
                shipped[id(fn)] = ShippedFunction.of(fn, by_value)
            except Exception:
                unpicklable.add(id(fn))
    return shipped
