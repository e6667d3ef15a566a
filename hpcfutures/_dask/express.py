"""Small results ride with their task's end (see ``_remote/express.py``).

Worker -> scheduler -> client, on Dask's public event channel: the worker logs
the result as an event (``Worker.log_event``) on the topic of the client that
sent the task, and the scheduler hands every event of a topic to the clients
subscribed to it (``Client.subscribe_topic``), before anything else that comes
after it on the worker's stream.  The task's thread leaves its result in the
worker's outbox (:class:`ExpressOutbox`, a worker plug-in) just before it
returns; the worker logs it as the task ends, in one batch with Dask's
"task-finished".  The scheduler handles a batch's messages one after the other
without yielding, so the result leaves in the same batch as the "key-in-memory"
that the task's end brings, and a client never holds a result before the
scheduler has seen its worker free (a call it sends at once is never placed
behind a busy worker's call for want of that news).  The outcomes a group sends
while it runs travel the same way, at once.  The scheduler never unpickles a
result; Dask keeps the last events of each topic
(``distributed.admin.low-level-log-length``, 1,000 by default, each at most
``EXPRESS_BYTES``), and there are 16 topics (:func:`express_topic`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distributed import Client, Worker
from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["ExpressOutbox", "bind_to_thread", "expect_express_results", "express_topic",
           "running_task_key", "send_express"]

#: The events that carry small results: topics named so, then one hex digit.
TOPIC_PREFIX = "hpcfutures-express-"


def express_topic(key: Any) -> str | None:
    """The event topic of the client that named ``key``; None for a key of another.

    A client's keys start with ``hpcf-<8 hex digits>-`` (``_facade/core/sending.py``),
    and its topic is named by the first of those digits: one of 16.  Dask keeps the
    last 1,000 events of every topic for as long as the scheduler runs, so 16 topics
    bound what the scheduler holds however many clients come and go (a serving
    launch); clients that share a topic each drop the other's results unread.
    """
    if isinstance(key, str) and key.startswith("hpcf-") and len(key) > 14:
        return TOPIC_PREFIX + key[5]
    return None


def _log(worker: Worker, key: Any, payload: bytes) -> None:
    topic = express_topic(key)
    if topic is not None:  # else the client fetches the result as Dask does
        worker.log_event(topic, [key, payload])


def running_task_key() -> Any:
    """The key of the task this thread runs, by Dask's public word
    (``get_worker().get_current_task()``); None outside a task."""
    from distributed.worker import get_worker

    try:
        return get_worker().get_current_task()
    except (ValueError, KeyError):  # not a worker's thread; a worker's, between tasks
        return None


def send_express(payload: bytes) -> None:
    """Send a running task's small result ahead of its end (from the task's thread).

    The worker is the one running this thread's task (a process of the scale
    harness hosts hundreds); outside a task nothing is sent.
    """
    from distributed.worker import get_worker

    try:
        worker = get_worker()
        key = worker.get_current_task()
    except (ValueError, KeyError):  # not a worker's thread; a worker's, between tasks
        return
    outbox = worker.plugins.get(ExpressOutbox.name)
    if isinstance(outbox, ExpressOutbox):  # else the client fetches the result as Dask does
        outbox.outcomes[key] = payload


class ExpressOutbox(WorkerPlugin):
    """A worker's small task outcomes, each sent to the scheduler as its task ends:
    queued on the worker's stream in the same batch as Dask's "task-finished"."""

    name = "hpcfutures-express"

    def __init__(self) -> None:
        #: Key -> its outcome, left by the task's thread just before it returned.
        self.outcomes: dict[Any, bytes] = {}
        self._worker: Worker | None = None

    def setup(self, worker: Worker) -> None:
        self._worker = worker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        # The task's next transition after its thread left the outcome is its end:
        # done (sent), failed or cancelled (dropped).
        if not self.outcomes:
            return
        payload = self.outcomes.pop(key, None)
        if payload is not None and finish == "memory" and self._worker is not None:
            _log(self._worker, key, payload)


#: The longest heartbeat period (ms) at which a worker tells the scheduler early of a
#: call that runs long (``bind_to_thread``).
NUDGE_UP_TO_MS = 1000


def bind_to_thread() -> tuple[Callable[[], Any], Callable[[Any, bytes], None],
                              Callable[[], None]] | None:
    """For a worker thread: how to read the key of the task it runs, how to send a
    task's small results from any thread, and how to tell the scheduler at once what
    the worker runs and for how long (its heartbeat, sent early: the scheduler's work
    stealing then sees a call that runs long, and moves a group queued behind it to a
    free worker); None outside a worker."""
    from distributed.worker import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return None

    def task_key() -> Any:
        try:
            return worker.get_current_task()
        except KeyError:  # between tasks
            return None

    def send(key: Any, payload: bytes) -> None:
        _log(worker, key, payload)  # Dask's log_event is safe from any thread

    def nudge() -> None:
        # Only where Dask's own heartbeats come every second or more often (up to 50
        # workers): a larger launch spaces them out to spare its scheduler.
        if worker.periodic_callbacks["heartbeat"].callback_time <= NUDGE_UP_TO_MS:
            worker.loop.add_callback(worker.heartbeat)

    return task_key, send, nudge


def expect_express_results(client: Client, key_prefix: str,
                           received: Callable[[Any, bytes], None]) -> None:
    """Call ``received(key, payload)`` on the client's loop for each small result of
    a task whose key starts with ``key_prefix`` (the client's own)."""
    topic = express_topic(key_prefix + "x")  # the topic of any key the prefix begins
    if topic is None:
        raise ValueError(f"{key_prefix!r} is not a prefix of hpcfutures' task keys")

    def handle(event: tuple[float, list[Any]]) -> None:
        key, payload = event[1]
        received(key, payload)

    client.subscribe_topic(topic, handle)
