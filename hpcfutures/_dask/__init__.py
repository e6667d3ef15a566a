"""The Dask lifecycle: start and stop the scheduler, a worker, the client.

This package is the only place that imports ``distributed``'s internals, one
module per role: :mod:`.scheduler` (the Coordinator plug-in and the scheduler
service), :mod:`.worker` (a worker in a rank's process) and :mod:`.client`
(connecting, finishing, asking the scheduler).  Everything here is a
coroutine; the session runs it either on a fresh event loop (the scheduler
and worker ranks) or on the client's loop thread.

How the end of a launch travels::

    client ── hpcfutures_finish(status) ──> scheduler (Coordinator plugin)
    scheduler ── {"op": hpcfutures-verdict} + {"op": close} ──> every worker
    scheduler closes; each rank exits with the client's status

If the client disappears without saying goodbye (killed, node lost), the
Coordinator sees its connection drop and ends the launch with a failure status.
"""

from ._common import EXIT_FAILED, make_security
from .client import (
    connect_client,
    dashboard_facts,
    finish_client,
    follow_cluster,
    probe,
    request_stop,
    start_usage,
    usage_report,
    wait_for_workers,
)
from .scheduler import Coordinator, SchedulerService
from .worker import WorkerService, run_worker

__all__ = [
    "EXIT_FAILED",
    "Coordinator",
    "SchedulerService",
    "WorkerService",
    "connect_client",
    "dashboard_facts",
    "finish_client",
    "follow_cluster",
    "make_security",
    "probe",
    "request_stop",
    "run_worker",
    "start_usage",
    "usage_report",
    "wait_for_workers",
]
