"""The Dask lifecycle: start and stop the scheduler, a worker, the client.

This package is the only place that touches ``distributed``'s objects: their
attributes, RPCs, handlers and plug-in hooks.  The rest of hpcfutures calls
the typed functions exported here.  One module per role or question:
:mod:`.scheduler` (the scheduler service), :mod:`.coordinator` (its plug-in),
:mod:`.worker` (a worker in a rank's process), :mod:`.client` (connecting,
following the cluster, finishing), :mod:`.cluster` (what the client asks
about the workers), :mod:`.usage` (the summary's ledger on the scheduler),
:mod:`.release` (retiring idle workers), :mod:`.initializer` (the
executor's ``initializer``, run on every worker) and :mod:`.deaths` (death
certificates of workers a call killed).  Most of it is coroutines; the
session runs them either on a fresh event loop (the scheduler and worker
ranks) or on the client's loop thread.  Every private Dask name relied on
here is pinned by ``tests/test_dask_seams.py``.

How the end of a launch travels::

    client ── {"op": hpcfutures-finish, status} + close-client ──> scheduler (Coordinator)
    scheduler ── {"op": hpcfutures-verdict} + {"op": close} ──> every worker
    scheduler closes; each rank exits with the client's status

If the client disappears without saying goodbye (killed, node lost), the
Coordinator sees its connection drop and ends the launch with a failure status.
"""

from ._common import EXIT_FAILED, make_security
from .client import (
    Knock,
    connect_client,
    finish_client,
    follow_cluster,
    knock,
    listening,
    on_scheduler_lost,
    probe,
    report_startup_failure,
    request_stop,
    wait_for_workers,
)
from .cluster import (
    DashboardFacts,
    WorkerChanges,
    WorkerFacts,
    WorkerPlace,
    ask_workers,
    cluster_size,
    dashboard_facts,
    released_workers,
    total_threads,
    worker_changes,
    worker_facts,
    worker_names,
    worker_resources,
)
from .coordinator import Coordinator
from .deaths import death_certificate, death_certificates, lost_worker, report_death
from .express import expect_express_results
from .initializer import register_initializer
from .mpigroups import follow_member_losses, release_ranks, reserve_ranks, tell_call_failed
from .scheduler import SchedulerService
from .tuning import patient_connects
from .usage import UsageReport, WorkerUsage, start_usage, usage_report
from .worker import WorkerService, declared_resources, run_worker, startup_error

__all__ = [
    "EXIT_FAILED",
    "Coordinator",
    "DashboardFacts",
    "Knock",
    "SchedulerService",
    "UsageReport",
    "WorkerChanges",
    "WorkerFacts",
    "WorkerPlace",
    "WorkerService",
    "WorkerUsage",
    "ask_workers",
    "cluster_size",
    "connect_client",
    "dashboard_facts",
    "death_certificate",
    "death_certificates",
    "declared_resources",
    "expect_express_results",
    "finish_client",
    "follow_cluster",
    "follow_member_losses",
    "knock",
    "listening",
    "lost_worker",
    "make_security",
    "on_scheduler_lost",
    "patient_connects",
    "probe",
    "register_initializer",
    "release_ranks",
    "released_workers",
    "report_death",
    "report_startup_failure",
    "request_stop",
    "reserve_ranks",
    "run_worker",
    "start_usage",
    "startup_error",
    "tell_call_failed",
    "total_threads",
    "usage_report",
    "wait_for_workers",
    "worker_changes",
    "worker_facts",
    "worker_names",
    "worker_resources",
]
