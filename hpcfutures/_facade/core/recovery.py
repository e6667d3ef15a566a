"""Calls whose worker died under them: fail the one that killed it, run the others again.

hpcfutures' scheduler does not retry a task whose worker died (see
``_dask/deaths.py``): the task comes back at once as Dask's ``KilledWorker``.
A task is a *group* of calls (one call, a ``map`` chunk, a bundle of
``submit`` calls), and the dead worker's death certificate names the call
that was running when its process ended, and how it ended.  Then:

* **the culprit** (it exited or died of a signal while that call ran) fails
  with :class:`~hpcfutures.WorkerCrashError`; the calls of its group before
  it (a chunk's results were lost with the worker) and after it (a bundle's)
  run again, without it;
* **every other call** lost with the worker runs again: one lost with a
  culprit's worker (queued behind it, or running beside it) as often as that
  happens (each time a worker is gone, so it happens only so often); one lost
  with a worker killed from outside or lost with its node (no certificate,
  or one that blames nobody) at most :data:`MAX_LOSSES` times, then it fails
  with a ``WorkerCrashError`` that says so;
* **a call whose argument was such a lost task** waits until that argument
  is settled again, then runs again too (or fails with its error, as a call
  whose argument failed does).

Loop thread only, like the rest of the task machinery.
"""

from __future__ import annotations

import asyncio
import logging
import reprlib
import signal
from collections.abc import Sequence
from typing import Any

from ..._errors import WorkerCrashError
from ..._remote.calls import GivenBack, fail_with, restore_traceback, run_bundle, run_chunk_task
from ..._remote.carried import uncarried
from ..._remote.deathwatch import function_name
from ..._support.loop import loop_thread_only
from ..._support.patience import Patience
from .arguments import futures_in
from .engine import Engine
from .futures import TaskFuture, settle

__all__ = ["CERTIFICATE_WAIT", "MAX_LOSSES", "Recovery", "call_label", "crash_error",
           "exit_status_of", "lost_error"]

logger = logging.getLogger("hpcfutures")

#: Times a call runs again after its worker was lost through no fault of its own.
MAX_LOSSES = 3
#: States of a Dask future whose value can no longer be had from the cluster.
_GONE = ("error", "cancelled", "lost")
#: Seconds the client gathers the dead workers it hears of before asking for their
#: certificates in one request (a wave's task failures arrive over a few turns of its loop).
WAVE_GATHERING = 0.02
#: Seconds the client waits for a dead worker's certificate (its watcher imports
#: Dask, connects, reports: about a second; a watcher lost with its node never does),
#: when one worker died; more when many did at once (Patience.certificate_wait).
CERTIFICATE_WAIT = Patience().certificate_wait(1)


class Recovery:
    """Decides, for each task lost with its worker, what becomes of its calls.

    Args:
        client: The Dask client.
        engine: The engine (the bridge) it is part of: its sender sends a group
            again (``sender.resend``); it breaks the executor when no worker is
            left (``break_executor``) and runs coroutines on the loop
            (``in_background``).
    """

    def __init__(self, client: Any, engine: Engine) -> None:
        from ... import _dask  # the client is connected: distributed is imported already

        self._dask = _dask
        self._client = client
        self._engine = engine
        #: Per dead worker, the scheduler's answer (asked once, shared).
        self._answers: dict[str, asyncio.Future] = {}
        #: The exit status of the first worker a call killed (signals as 128+N).
        self.crash_status: int | None = None
        #: The launch's waits (the client side sets them from its size).
        self.patience = Patience()
        #: Dead workers whose certificate is being waited for now (a wave's size).
        self._waiting = 0
        #: Dead workers asked about in this turn of the loop, and the request sending them.
        self._wave: list[str] = []
        self._wave_request: asyncio.Future | None = None

    @loop_thread_only
    def lost(self, dask_future: Any, future: TaskFuture, exception: BaseException) -> bool:
        """Take over ``future`` if its task was lost with a worker; whether it did."""
        call = getattr(future, "_call", None)  # None: not a call of this engine's
        if call is None or call.recipe is None:
            return False
        if isinstance(exception, GivenBack):
            # An argument picked out of a bundle that gave that call back to run elsewhere.
            self._engine.in_background(self._after_arguments(future, call.recipe))
            return True
        lost = self._dask.lost_worker(exception)
        if lost is None:
            return False
        self._engine.in_background(self._recover(dask_future, future, *lost))
        return True

    async def _recover(self, dask_future: Any, future: TaskFuture, key: str,
                       worker: str) -> None:
        recipe = future._call.recipe
        if future.done() or recipe is None:
            return
        if key != str(dask_future.key):  # an argument's task was lost, not this one
            await self._after_arguments(future, recipe)
            return
        await self._judge(future, recipe, key, worker)

    async def _judge(self, future: TaskFuture, recipe: tuple, key: str, worker: str) -> None:
        """Blame the call the certificate names, or send the group again."""
        answer = await self._answer(worker)
        certificate: dict[str, Any] = answer.get("certificate") or {}
        culprit = certificate.get("culprit")
        if culprit is not None and culprit.get("key") == key:
            index = int(culprit["index"])
            label = call_label(recipe, index, future._call.places)
            self._blame(future, recipe, index, crash_error(certificate, label))
            if self.crash_status is None:
                self.crash_status = exit_status_of(certificate)
        elif culprit is not None:  # another call killed it: not this one's doing
            self._engine.sender.resend(future, recipe)
        else:
            call = future._call
            if call.lost_again() > MAX_LOSSES:
                settle(future, exception=lost_error(recipe, call.losses, certificate or None,
                                                    call_label(recipe, None, call.places)))
            else:
                self._engine.sender.resend(future, recipe)
        if answer.get("none_left"):
            self._engine.break_executor(answer["none_left"])

    async def _answer(self, worker: str) -> dict[str, Any]:
        pending = self._answers.get(worker)
        if pending is None:
            pending = self._answers[worker] = asyncio.get_running_loop().create_future()
            self._wave.append(worker)
            if self._wave_request is None:
                self._wave_request = asyncio.ensure_future(self._ask_wave())
        return await asyncio.shield(pending)

    async def _ask_wave(self) -> None:
        """Ask for the certificates of the workers lost together, in one request.

        A wave of deaths reaches the client as many task failures over a few turns of
        its loop; a request for each would open a connection to the scheduler for each
        (each request in flight needs its own): a wave's hundreds of TLS handshakes
        would queue behind the client's other connections and time out, and the lost
        calls would run again only after that."""
        await asyncio.sleep(WAVE_GATHERING)
        workers, self._wave, self._wave_request = self._wave, [], None
        self._waiting += len(workers)
        try:
            answers = await self._dask.death_certificates(
                self._client, workers, self.patience.certificate_wait(self._waiting))
        except Exception as err:  # the scheduler is gone: the bridge breaks for that
            logger.debug("no death certificates for %d workers: %s", len(workers), err)
            answers = {}
        finally:
            self._waiting -= len(workers)
        for worker in workers:
            pending = self._answers[worker]
            if not pending.done():
                pending.set_result(answers.get(worker) or {})

    async def none_left(self) -> str | None:
        """Why no worker is left and none can come, if so (the scheduler knows: it may
        wait as long as for a certificate, for the deaths it still expects to hear of)."""
        try:
            answer = await self._dask.death_certificate(
                self._client, "", self.patience.certificate_wait(self._waiting + 1))
        except Exception as err:  # the scheduler is gone: the bridge breaks for that
            logger.debug("no answer on the workers left: %s", err)
            return None
        return answer.get("none_left")

    def _blame(self, future: TaskFuture, recipe: tuple, index: int,
               crash: WorkerCrashError) -> None:
        """The call at ``index`` of ``future``'s group killed its worker."""
        runner, fn, args, kwargs, depends = recipe
        if runner is run_chunk_task and index > 0:
            # The items before it ran, but their results died with the worker.
            self._engine.sender.resend(future, (runner, fn, (list(args[0])[:index],),
                                  {**kwargs, "then": crash}, depends))
        elif runner is run_bundle and len(args[0]) > 1:
            calls = list(args[0])
            calls[index] = (fail_with, (crash,), {})
            self._engine.sender.resend(future, (runner, fn, (calls, *args[1:]), kwargs, depends))
        else:  # one call (run_task), a chunk's first item, a bundle of one
            settle(future, exception=restore_traceback(crash))

    async def _after_arguments(self, future: TaskFuture, recipe: tuple) -> None:
        """Send the call again once the futures among its arguments are settled again."""
        runner, _fn, args, kwargs, _depends = recipe
        found = futures_in(list(args[0]) if runner is run_chunk_task else args, kwargs)
        arguments = [f for f in found if isinstance(f, TaskFuture)]
        loop = asyncio.get_running_loop()
        for argument in arguments:
            if not argument.done():
                settled: asyncio.Future[None] = loop.create_future()

                def wake(_: Any, settled: asyncio.Future[None] = settled) -> None:
                    loop.call_soon_threadsafe(_set_once, settled)

                argument.add_done_callback(wake)
                await settled
        for argument in arguments:
            error = (None if not argument.done() else
                     asyncio.CancelledError() if argument.cancelled() else argument.exception())
            if error is not None:
                settle(future, exception=error)
                return
            handle = argument._call.dask
            if handle is not None and getattr(handle, "status", None) in _GONE:
                # Its value is here, but its task on the cluster (or the pick of
                # it out of a bundle) was lost and is not run again: the value
                # travels with the call instead.
                argument._call.cut_loose()
        call = future._call
        if call.lost_again() > 2 * MAX_LOSSES:  # its arguments are lost again and again
            settle(future, exception=lost_error(recipe, call.losses, None,
                                                call_label(recipe, None, call.places)))
        elif not future.done():
            self._engine.sender.resend(future, recipe)


def _set_once(settled: asyncio.Future[None]) -> None:
    if not settled.done():
        settled.set_result(None)


def exit_status_of(certificate: dict[str, Any]) -> int:
    """A dead worker's exit status as a shell reports it: a signal N is 128+N."""
    if certificate.get("how") == "exit":
        return int(certificate.get("status") or 0)
    try:
        return 128 + int(signal.Signals[str(certificate.get("signal"))])
    except KeyError:
        return 128 + int(signal.SIGKILL)


def call_label(recipe: tuple, index: int | None, places: Sequence[int] | None) -> str | None:
    """Which call it was: a map item's position, or a submitted call with its arguments.

    ``index`` is the call's place in its group (None: the whole group); ``places``
    the map positions of a chunk's items.
    """
    runner, fn, args, kwargs, _depends = recipe
    if runner is run_chunk_task:
        if not places:
            return None if index is None else f"item {index} of its map chunk"
        if index is not None and 0 <= index < len(places):
            return f"map item {places[index]}"
        if len(places) == 1:
            return f"map item {places[0]}"
        if places[-1] - places[0] == len(places) - 1:
            return f"map items {places[0]}-{places[-1]}"
        shown = ", ".join(str(place) for place in places[:5])
        return f"map items {shown}{', ...' if len(places) > 5 else ''}"
    if runner is run_bundle:
        calls = list(args[0])
        if index is None and len(calls) == 1:
            index = 0
        if index is None or not 0 <= index < len(calls):
            return None
        fn, args, kwargs = calls[index]
        args, kwargs = uncarried(args, kwargs)  # a bundle's calls travel boxed
    return f"call {_call_text(fn, args, kwargs)}"


def _call_text(fn: Any, args: Any, kwargs: Any) -> str:
    """``name(1, 'a', key=2.5)``, each argument shortened (reprlib), the whole at most
    about a line."""
    shorten = reprlib.Repr()
    shorten.maxstring = shorten.maxother = 30
    parts = [shorten.repr(value) for value in args]
    parts += [f"{name}={shorten.repr(value)}" for name, value in dict(kwargs).items()]
    text = ", ".join(parts)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{getattr(fn, '__name__', 'call')}({text})"


def crash_error(certificate: dict[str, Any], call: str | None = None) -> WorkerCrashError:
    """The culprit's error: the function, which call (``call``), how its process ended,
    where, what to do."""
    culprit = certificate.get("culprit") or {}
    function = culprit.get("function", "the call")
    where = certificate.get("who") or f"the worker at {certificate.get('worker')}"
    if certificate.get("how") == "exit":
        how = f"exited with status {certificate.get('status')} (os._exit or a C exit())"
    else:
        how = f"was killed by {certificate.get('signal')}"
    report = certificate.get("report") or ""
    hint = ("The Python traceback of the crash (faulthandler's report) is the cause "
            "below, and in that worker's output" if report else
            "Its output may say more")
    which = f" ({call})" if call else ""
    error = WorkerCrashError(
        f"{function}{which} crashed its worker: the process {how} while running it, on "
        f"{where}. "
        f"Only this call fails; the others run again on the remaining workers. {hint}; to "
        "debug, run the call in a local process (python -X faulthandler, or under gdb).",
        function, where, certificate.get("status"), certificate.get("signal"))
    if report:
        error._hpcfutures_remote_traceback = (  # type: ignore[attr-defined]
            f'\n"""\nFatal error report from {where}:\n{report}\n"""')
    return error


def lost_error(recipe: tuple, losses: int, certificate: dict[str, Any] | None,
               call: str | None = None) -> WorkerCrashError:
    """A call lost with more workers than it may be: killed from outside, each time?"""
    runner, fn, args, _kwargs, _depends = recipe
    if runner is run_bundle:
        fn = next((call[0] for call in args[0] if call[0] is not fail_with), None)
    function = function_name(fn) if fn is not None else "the call"
    last = (certificate or {}).get("who") or "a worker"
    which = f" ({call})" if call else ""
    return WorkerCrashError(
        f"{function}{which} was running on a worker that was lost, {losses} times in a row "
        f"(the last: {last}), killed from outside (SIGKILL, the OOM killer) or with its "
        f"node; hpcfutures runs such a call again {MAX_LOSSES} times, then gives up. If the "
        "call itself uses too much memory, give each worker more (memory_limit=), or fewer "
        "workers per node", function, last, None, None, losses)

