"""The ``submit`` side of batching: plain calls held on the client, sent in bundles.

A loop of a few thousand ``submit(f, x)`` calls of tiny functions would run
at Dask's pace (about a millisecond per task), not the workers'.  So calls
with no future among their arguments wait here, like in
``ProcessPoolExecutor``'s call queue, and the batching engine
(:mod:`.batching`) decides when a bundle goes and how many calls it carries.

Each call keeps its own future, result and exception.  A call still waiting
here can be cancelled for real; once sent its future is RUNNING and, as with
``ProcessPoolExecutor``, no longer cancellable.  A call whose future becomes
an argument of a later ``submit`` is sent at once, and its value is picked out
of its bundle on the workers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ..._remote.calls import BundleOutcome, restore_traceback, run_bundle
from ..._remote.express import Early
from ..._support.loop import loop_thread_only
from .batching import Stream
from .engine import Engine
from .futures import TaskFuture, mark_running, settle
from .pacing import waited

__all__ = ["SubmitStream"]


class SubmitStream(Stream):
    """The plain ``submit`` calls, in order: each ``(future, fn, args, kwargs)``.

    Args:
        engine: The engine (the bridge) it is part of: its ``batcher`` cuts bundles
            off this stream; its ``sender`` sends a bundle (``launch_internal``) or
            one call (``launch_alone``); its ``early_outcomes`` take a running
            bundle's first outcomes; ``wake`` asks it to plan again (a bundle came back).
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._engine = engine
        #: Each bundle on the workers -> its calls (until it comes back).
        self._calls_of: dict[TaskFuture, list] = {}

    def hold(self, future: TaskFuture, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Queue a call (any thread)."""
        call = (future, fn, args, kwargs)
        future._call.hold(call)
        self._engine.batcher.add(self, call)

    # ------------------------------------------- the engine's view (its lock held)
    def head_fn(self) -> Callable[..., Any] | None:
        pending = self.pending
        while pending:
            future, fn = pending[0][:2]
            if future._call.held is not None and not future.done():
                return fn
            pending.popleft()  # cancelled while waiting here, or sent at once alone
        return None

    def take(self, n: int) -> list:
        fn = self.head_fn()
        pending = self.pending
        taken: list[tuple[Any, ...]] = []
        while pending and len(taken) < n:
            call = pending[0]
            if call[0]._call.held is None or call[0].done():
                pending.popleft()
            elif call[1] is fn:
                call[0]._call.unhold()
                taken.append(pending.popleft())
            else:
                break
        return taken

    def _claim(self, future: TaskFuture) -> tuple | None:
        """``future``'s call, if it still waits here, no longer waiting (engine's lock held).

        O(1): its entry stays in ``pending``, skipped when it comes to the front,
        so a dependent ``submit`` costs no scan of the calls held (10⁶ may be).
        """
        if future.done():
            return None
        return future._call.unhold()

    # ---------------------------------------------------------- loop thread
    @loop_thread_only
    def dispatch(self, calls: list) -> None:
        """Send one bundle; if it cannot be pickled as a whole, each call alone."""
        group = [(fn, args, kwargs) for _, fn, args, kwargs in calls]
        bundle = self._engine.sender.launch_internal(
            run_bundle, (group,), getattr(calls[0][1], "__name__", "task"),
            calls=len(calls), expect=self._expected(group))
        if bundle is None:
            for future, fn, args, kwargs in calls:
                self._engine.sender.launch_alone(future, fn, args, kwargs)
            self._engine.batcher.done(self)
            self._engine.wake()
            return
        bundle._call.group_sent(members=[future for future, *_rest in calls])
        for index, (future, *_rest) in enumerate(calls):
            future._call.in_bundle(bundle, index)
            mark_running(future)
        self._calls_of[bundle] = calls
        self._engine.early_outcomes[bundle] = lambda early: self._arrived_early(bundle, early)
        bundle.add_done_callback(lambda done: self._finished(cast(TaskFuture, done), calls))

    def _expected(self, group: list) -> float | None:
        """The longest estimate among a bundle's functions (None: one is not known):
        its worker gives back the calls behind one that runs far longer."""
        functions = {id(fn): fn for fn, *_ in group}.values()
        estimates = [self._engine.batcher.durations.get(fn) for fn in functions]
        known = [seconds for seconds in estimates if seconds is not None]
        return max(known) if len(known) == len(estimates) else None

    def _arrived_early(self, bundle: TaskFuture, early: Early) -> None:
        """The outcomes of a running bundle's first calls settle their futures; the calls
        its worker gave back go again (loop thread)."""
        calls = self._calls_of.get(bundle)
        if calls is None:
            return
        _deliver(calls[early.first:], early.outcomes)
        if early.rest is not None:
            self.given_back(bundle, early.rest)

    @loop_thread_only
    def given_back(self, bundle: TaskFuture, rest: int) -> None:
        """The worker gave back ``bundle``'s calls from ``rest`` on (a call before them
        ran long: ``_remote/express.py``): they go again as a bundle of their own, for
        a free thread; ``bundle`` keeps the calls before them (loop thread)."""
        calls = self._calls_of.get(bundle)
        if calls is None or rest >= len(calls):
            return  # came back already, or given back already
        again = calls[rest:]
        del calls[rest:]
        bundle._call.gave_back(rest)  # sent again without them, should its worker die
        for future, *_rest in again:
            # A pick of it out of this bundle fails (GivenBack): its dependent is sent
            # again once it is settled (recovery.py), with a pick from its new bundle.
            future._call.drop_task()
        self._engine.batcher.count_out(self)
        self.dispatch(again)

    def drained(self, calls: list, error: BaseException) -> None:
        """The executor drained: the calls still held here fail with ``error``."""
        for future, *_rest in calls:
            if future._call.unhold() is not None:  # not one already sent alone
                settle(future, exception=error)

    @loop_thread_only
    def send_now(self, future: TaskFuture) -> None:
        """Send a waiting call at once, alone: its future is about to become an argument."""
        call = self._engine.batcher.take_out(self, lambda: self._claim(future))
        if call is not None:
            self.dispatch([call])

    def _finished(self, bundle: TaskFuture, calls: list) -> None:
        error = bundle.exception()
        if error is None and (ran := len(bundle.result().results)) < len(calls):
            # Its worker gave calls back, and the word of it did not arrive first.
            self.given_back(bundle, ran)
        self._calls_of.pop(bundle, None)
        self._engine.early_outcomes.pop(bundle, None)
        if error is not None:  # the whole bundle failed (lost worker, unpicklable result...)
            self._engine.batcher.done(self)
            for future, *_rest in calls:
                settle(future, exception=error)
        else:
            outcome = bundle.result()
            busy = sum(outcome.seconds)
            self._engine.batcher.done(self, _per_function(calls, outcome), busy,
                               waited(outcome.idle, bundle._call.sent_at, busy))
            _deliver(calls, outcome.results)
            # The bundle outlives this call while any of its futures lives (an
            # argument picks its value from the bundle's Dask future), so it must
            # hold no call's result, function or arguments: each call's own
            # future holds those, and frees them when the caller drops it.
            outcome.results.clear()
        calls.clear()  # the bundle's done callback (this) held every call
        self._engine.wake()


def _per_function(calls: list, outcome: BundleOutcome) -> list[tuple[Any, float]]:
    """Mean seconds per call of each function in a bundle: one measurement each."""
    totals: dict[int, list] = {}
    for (_, fn, *_rest), seconds in zip(calls, outcome.seconds, strict=False):
        entry = totals.setdefault(id(fn), [fn, 0.0, 0])
        entry[1] += seconds
        entry[2] += 1
    return [(fn, total / count) for fn, total, count in totals.values()]


def _deliver(calls: list, results: list) -> None:
    """Settle each call's future with its ``(ok, value)`` outcome, in order."""
    for (future, *_rest), (ok, value) in zip(calls, results, strict=False):
        if ok:
            settle(future, result=value)
        else:
            settle(future, exception=restore_traceback(value))
