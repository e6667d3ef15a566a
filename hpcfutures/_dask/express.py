"""Small results ride with their task's end (see ``_remote/express.py``).

Worker -> scheduler -> client, each time on the stream that then carries the
task's end: the worker queues the result on its batched stream from the task's
thread before the task returns (so ahead of Dask's "task-finished"), the
scheduler passes it on to the clients that want the key before it handles that
end, and the client's report stream hands it over before "key-in-memory".  The
scheduler neither unpickles nor keeps it (unlike an event topic, whose last
messages it holds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distributed import Client, Scheduler

__all__ = ["EXPRESS_OP", "bind_to_thread", "expect_express_results", "relay_express_results",
           "send_express"]

#: A small result, on the worker's stream and then on the client's.
EXPRESS_OP = "hpcfutures-express"


def send_express(payload: bytes) -> None:
    """Send a running task's small result ahead of its end (from the task's thread).

    The worker is the one running this thread's task (a process of the scale
    harness hosts hundreds); outside a task nothing is sent.
    """
    from distributed.worker import get_worker, thread_state

    key = getattr(thread_state, "key", None)
    try:
        worker = get_worker()
    except ValueError:
        return
    if key is not None:
        _send_on(worker, key, payload)


def _send_on(worker: Any, key: Any, payload: bytes) -> None:
    """Queue ``key``'s small result on ``worker``'s stream to the scheduler (any thread)."""
    worker.loop.add_callback(worker.batched_send,
                             {"op": EXPRESS_OP, "key": key, "payload": payload})


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
    from distributed.worker import get_worker, thread_state

    try:
        worker = get_worker()
    except ValueError:
        return None

    def task_key() -> Any:
        return getattr(thread_state, "key", None)

    def send(key: Any, payload: bytes) -> None:
        _send_on(worker, key, payload)

    def nudge() -> None:
        # Only where Dask's own heartbeats come every second or more often (up to 50
        # workers): a larger launch spaces them out to spare its scheduler.
        if worker.periodic_callbacks["heartbeat"].callback_time <= NUDGE_UP_TO_MS:
            worker.loop.add_callback(worker.heartbeat)

    return task_key, send, nudge


def relay_express_results(scheduler: Scheduler) -> None:
    """Let ``scheduler`` pass the small results from workers on to the clients that want them."""

    def relay(key: Any = None, payload: bytes = b"", worker: str = "") -> None:
        task = scheduler.tasks.get(key)
        if task is None or not task.who_wants:  # released meanwhile: nobody waits
            return
        message = {"op": EXPRESS_OP, "key": key, "payload": payload}
        for client in task.who_wants:
            stream = scheduler.client_comms.get(client.client_key)
            if stream is not None:
                stream.send(message)

    scheduler.stream_handlers[EXPRESS_OP] = relay


def expect_express_results(client: Client, received: Callable[[Any, bytes], None]) -> None:
    """Call ``received(key, payload)`` on the client's loop for each small result."""

    def handle(key: Any = None, payload: bytes = b"") -> None:
        received(key, payload)

    client._stream_handlers[EXPRESS_OP] = handle
