"""``hpcfutures.allocate``: ask the batch system for workers, and use them from here.

::

    notebook / login node                         the batch system
    ─────────────────────                         ────────────────
    allocate(nodes=2, ...) ── script + sbatch ──> job (queued)
        wait for the queue (queue_timeout) ─────> running: srun hpcfutures serve
        wait for its scheduler file (timeout) <── rank 0 writes it (0600)
        connect(file) ── the usual executor ───── submit / map
    ex.scale(n) ── worker jobs (an array) ──────> hpcfutures serve --join file
    leave ── stop the launch, cancel what is left: nothing stays in the queue

The job is an ordinary ``hpcfutures serve`` launch, so everything that works
in one works here, TLS included.  A Ctrl-C or an error while waiting cancels
the job; a job that ends while the executor is open breaks it, with a
:class:`NotServingError` as the cause naming the job and its output.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import sys
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import AllocationLostError, NotServingError
from ..._launch.outside import expand_path
from ..._support.values import to_seconds
from ...launchers._batchfind import detect_batch_system, get_batch_system
from ...launchers._batchscript import (
    JobState,
    Request,
    memory_megabytes,
    parse_walltime,
)
from ...launchers._request import with_components
from .batchjob import Allocation, adaptive_target, await_serving, submit_components
from .connect import ConnectedExecutor

if TYPE_CHECKING:
    from ..._ssh.cluster import Cluster
    from ..._ssh.openssh import SSH

__all__ = ["AllocatedExecutor", "allocate"]

logger = logging.getLogger("hpcfutures")

DEFAULT_JOB_DIR = "~/.hpcfutures/jobs"
#: Seconds a stopped job may take to leave the queue before it is cancelled.
LEAVE_GRACE = 10.0


class AllocatedExecutor(ConnectedExecutor):
    """The executor :func:`allocate` returns: connected to the job it submitted.

    Leaving it (``with`` exit, :meth:`shutdown`) stops the job and any worker
    jobs :meth:`scale` added, and waits until none is left in the queue.
    ``allocation`` is the submitted job (``.job`` its id, ``.output`` its output file).
    """

    def __init__(self, allocation: Allocation, scheduler_file: Path, *,
                 timeout: float | str | None = None, serve_command: Sequence[str] = (),
                 worker_request: Request | None = None, cluster: Cluster | None = None,
                 idle_timeout: float | None = None) -> None:
        self.allocation = allocation
        super().__init__(scheduler_file, timeout=timeout, ssh=cluster)
        self._worker_request = worker_request
        self._serve_command = list(serve_command)
        #: Worker jobs added by scale()/adapt(): each an Allocation.
        self.worker_jobs: list[Allocation] = []
        #: allocate(workers=[...]) where the system has no heterogeneous jobs: each
        #: further component is a job of its own, its tasks workers of this one.
        self.component_jobs: list[Allocation] = []
        #: Workers the allocation has once all joined (None: not known).
        self.workers_expected: int | None = None
        self._ended = False
        self._scaling = threading.RLock()
        self._adapter: threading.Thread | None = None
        self._adaptive = (0, 0)
        self._stop_adapting = threading.Event()
        # An executor never shut down (a notebook closed) still leaves nothing queued.
        atexit.register(self._end_allocation)
        if self._bridge is not None:
            self._bridge.scheduler_pointer = (
                f"it ran in {allocation}; see its output {allocation.output}")
            self._bridge.broken_type = AllocationLostError
            self._bridge.scheduler_lost_cause = NotServingError(
                f"{allocation} no longer serves (it ended, was cancelled, or reached its time "
                f"limit); its output is {allocation.output}")
            if self._cluster is not None:
                from .remote import lost_over_ssh, ssh_pointer

                self._bridge.scheduler_lost_cause = lost_over_ssh(
                    self._cluster, str(allocation), self.scheduler_file, idle_timeout,
                    allocation.output)
                self._bridge.scheduler_pointer = ssh_pointer(self._cluster, str(allocation))

    def _after_disconnect(self) -> None:
        """Leaving stops the job; the SSH connection stays until it has left the queue."""
        self._end_allocation()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Finish the calls (as ``concurrent.futures`` does), then stop the job."""
        super().shutdown(wait, cancel_futures=cancel_futures)

    def stop_allocation(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The same as :meth:`shutdown`: the job is this executor's own."""
        self.shutdown(wait, cancel_futures=cancel_futures)

    def _end_allocation(self) -> None:
        self._stop_adapting.set()
        with self._scaling:
            if self._ended:
                return
            self._ended = True
        atexit.unregister(self._end_allocation)
        for worker_job in (*self.worker_jobs, *self.component_jobs):
            if worker_job.state() is JobState.PENDING:
                worker_job.cancel()
        try:
            info = self._outside.exchange.found
            if info is not None and self.allocation.state() is not JobState.GONE:
                try:
                    self._stop_launch(info)
                except Exception as err:  # the job is cancelled below instead
                    logger.info("could not stop %s politely: %s", self.allocation, err)
            for job in (self.allocation, *self.worker_jobs, *self.component_jobs):
                job.leave_queue(LEAVE_GRACE)
        finally:
            self._release_cluster()

    def _expected_workers(self) -> int | None:
        return self.workers_expected

    def _submit_components(self, components: Sequence[Request]) -> None:
        """One job per component, each task a worker of this allocation (hpcfutures join)."""
        try:
            submit_components(self.allocation, components, self._serve_command,
                              self.component_jobs)
        except BaseException:
            self._end_allocation()
            raise

    # ------------------------------------------------------------ scaling
    def workers(self) -> int:
        """How many workers are connected now (the allocation's and the worker jobs')."""
        with self._lock:
            bridge = self._usable_bridge()
        return bridge.workers_now(self._session.settings.timeout)

    def scale(self, jobs: int) -> None:
        """Keep ``jobs`` worker jobs (one worker each) beside the allocation.

        More are submitted as one job array; fewer: the pending ones are
        cancelled first, then the newest running ones (their calls are sent
        again elsewhere).  Workers idle for ``release_idle_after`` (an
        :func:`allocate` keyword) leave by themselves and their jobs end.
        """
        if not isinstance(jobs, int) or jobs < 0:
            raise ValueError(f"jobs must be a whole number of at least 0, got {jobs!r}")
        with self._scaling:
            self._scale(jobs)

    def _scale(self, jobs: int) -> None:
        if self._worker_request is None or self._ended:
            raise RuntimeError("this executor's allocation has ended: it cannot scale")
        live = [(job, job.state()) for job in self.worker_jobs]
        self.worker_jobs = [job for job, state in live if state is not JobState.GONE]
        count = sum(job.request.array or 1 for job in self.worker_jobs)
        if jobs > count:
            request = Request(**{**vars(self._worker_request), "array": jobs - count})
            worker_job = type(self.allocation)(self.allocation.system, request,
                                    self.allocation.script_path.parent, self._serve_command)
            worker_job.submit()
            self.worker_jobs.append(worker_job)
            return
        pending_first = sorted(self.worker_jobs, key=lambda job: dict(live).get(job)
                               is not JobState.PENDING)
        for job in reversed(pending_first):
            size = job.request.array or 1
            if count - size >= jobs:
                job.cancel()
                self.worker_jobs.remove(job)
                count -= size

    def adapt(self, minimum: int = 0, maximum: int = 4, interval: float = 2.0) -> None:
        """Grow up to ``maximum`` worker jobs while calls wait, shrink to ``minimum`` when idle.

        Checks every ``interval`` s on a background thread until the executor
        is left.  Idle workers leave through ``release_idle_after``; this
        also cancels worker jobs still queued once nothing waits.
        """
        if not 0 <= minimum <= maximum:
            raise ValueError(f"adapt needs 0 <= minimum <= maximum, got {minimum}, {maximum}")
        self._adaptive = (minimum, maximum)
        if self._adapter is None:
            self._adapter = threading.Thread(target=self._adapt_loop, args=(interval,),
                                             name="hpcfutures-adapt", daemon=True)
            self._adapter.start()

    def _adapt_loop(self, interval: float) -> None:
        while not self._stop_adapting.wait(interval):
            bridge = self._bridge
            if bridge is None or bridge.broken is not None:
                return
            minimum, maximum = self._adaptive
            current = sum(job.request.array or 1 for job in self.worker_jobs)
            target = adaptive_target(bridge.waiting(), bridge.worker_threads(),
                                     current, minimum, maximum)
            try:
                if target != current:
                    self.scale(target)
                elif not bridge.waiting():
                    self._cancel_pending(keep=minimum)
            except Exception as err:  # never take the user's thread down
                logger.warning("adapt could not scale to %d worker jobs: %s", target, err)

    def _cancel_pending(self, keep: int) -> None:
        """Cancel worker jobs still queued, as long as ``keep`` jobs remain."""
        with self._scaling:
            count = sum(job.request.array or 1 for job in self.worker_jobs)
            for job in reversed(list(self.worker_jobs)):
                size = job.request.array or 1
                if count - size >= keep and job.state() is JobState.PENDING:
                    job.cancel()
                    self.worker_jobs.remove(job)
                    count -= size


def allocate(
    *,
    nodes: int = 1,
    tasks_per_node: int = 1,
    time: float | str | None = None,
    partition: str | None = None,
    account: str | None = None,
    memory: int | str | None = None,
    gpus: int | None = None,
    directives: Sequence[str] = (),
    batch_system: str | None = None,
    job_name: str = "hpcfutures",
    parallel_environment: str | None = None,
    job_dir: str | os.PathLike[str] = DEFAULT_JOB_DIR,
    python: str | None = None,
    idle_timeout: float | str | None = 600.0,
    release_idle_after: float | str | None = None,
    min_workers: int | None = None,
    timeout: float | str | None = None,
    queue_timeout: float | str | None = None,
    ssh: str | SSH | None = None,
    workers: Sequence[dict[str, Any]] | None = None,
) -> AllocatedExecutor:
    """Submit a serving job to the batch system, wait until it serves, and connect to it.

    ::

        with hpcfutures.allocate(nodes=2, tasks_per_node=8, time="01:00:00",
                                 partition="debug", account="proj42") as ex:
            results = list(ex.map(simulate, params))
        # the job has stopped: nothing is left in the queue

    Args:
        nodes, tasks_per_node: The shape of the job.  Task 0 runs the Dask
            scheduler and every other task a worker; a job of one task serves
            alone, with a worker per CPU it was given.
        time: The job's time limit: ``"HH:MM:SS"``, ``"D-HH:MM:SS"``, seconds or
            a duration such as ``"90min"``.  Default: the system's.
        partition: Slurm's partition; the queue of Grid Engine, PBS and LSF.
        account: The account (project) charged.
        memory: Memory per node, such as ``"16GB"``.
        gpus: GPUs per node.
        directives: Extra lines for the batch script, passed through unchanged
            (``["#SBATCH --constraint=haswell"]``).
        batch_system: ``"slurm"``, ``"sge"``, ``"pbs"`` or ``"lsf"``; default:
            the one whose commands are on PATH.
        job_name: The job's name in the queue.
        parallel_environment: Grid Engine only: the parallel environment of a
            job with several slots (default ``smp`` on one node, else ``mpi``).
        job_dir: Where the script, the scheduler file and the job's output go:
            a directory this machine shares with the job's nodes.
        python: The interpreter the job runs (default: this one).
        idle_timeout: The job stops by itself once no client has been connected
            for this long (a safety net if this process dies); None: never.
        release_idle_after, min_workers: Workers idle this long leave (their
            tasks, or their worker jobs, end), keeping ``min_workers``; as for
            :class:`~hpcfutures.Executor`.
        timeout: How long the running job may take to serve, and every other
            start-up wait (as for connect()).  Default: ``60`` s.
        queue_timeout: How long the job may wait in the queue; then it is
            cancelled and :class:`QueueTimeoutError` raised.  Default: no limit.
        ssh: Submit from this machine to a cluster reached by ``ssh``: a host or
            ``~/.ssh/config`` alias, or :class:`~hpcfutures.SSH` for the remote
            ``python`` and ``setup``.  ``job_dir`` is then on the cluster (``~``
            its home), and the client reaches the job's scheduler through one
            port forwarded over the SSH connection.  See the documentation's page
            on working from a laptop.
        workers: A heterogeneous job (Slurm): one dict per component, each with
            its ``nodes``, ``tasks_per_node``, ``memory`` and ``gpus`` (these
            replace the arguments of those names); task 0 of the first runs the
            scheduler.  One launch over all components: each worker has its
            component's resources (docs/resources.rst).  Where the batch system
            has no heterogeneous jobs, each further component is a job of its
            own whose tasks join as workers.

    Raises:
        AllocationError: the batch system refused the job (its message is quoted).
        QueueTimeoutError: still queued after ``queue_timeout``.
        NotServingError: the job ended before it served (its output is quoted).
        StartupTimeoutError: it ran but did not serve within ``timeout``.
        SSHError: ``ssh=``: the login failed (nothing was submitted), the site
            forbids port forwarding, or the connection broke.
    """
    from .remote import RemoteAllocation, open_cluster

    cluster = open_cluster(ssh) if ssh is not None else None
    try:
        system = cluster.batch_system(batch_system).as_batch_system() if cluster else \
            get_batch_system(batch_system) if batch_system else detect_batch_system()
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    wait_queue = None if queue_timeout is None else to_seconds(queue_timeout)
    wait_start = to_seconds(timeout) if timeout is not None else None
    request = Request(nodes=nodes, tasks_per_node=tasks_per_node, time=parse_walltime(time),
                      partition=partition, account=account, memory=memory_megabytes(memory),
                      gpus=gpus, name=job_name, directives=tuple(directives),
                      parallel_environment=parallel_environment)
    separate: tuple[Request, ...] = ()  # components as jobs of their own
    if workers is not None:
        request = with_components(request, list(workers))
        if not system.heterogeneous:
            request, separate = dataclasses.replace(request, components=()), request.components
    folder = cluster.path(job_dir) if cluster else expand_path(job_dir)
    token = uuid.uuid4().hex[:12]
    schedfile = folder / f"{job_name}-{token}.json"
    interpreter = python or (cluster.ssh.python or "python3" if cluster else sys.executable)
    serve = [interpreter, "-m", "hpcfutures", "serve", "--scheduler-file", str(schedfile)]
    if wait_start is not None:
        serve += ["--timeout", f"{wait_start:g}"]
    command = [*serve, *(["--idle-timeout", f"{to_seconds(idle_timeout):g}"]
                         if idle_timeout is not None else [])]
    environment = {name: str(value) for name, value in (
        ("HPCFUTURES_RELEASE_IDLE_AFTER", release_idle_after),
        ("HPCFUTURES_MIN_WORKERS", min_workers)) if value is not None}
    allocation = (RemoteAllocation if cluster else Allocation)(
        system, request, folder, command, token=token, environment=environment)
    try:
        allocation.submit()
    except BaseException:
        if cluster is not None:
            if allocation.job:  # Ctrl-C during the submission: it finished first
                allocation.cancel()
            cluster.close()
        raise
    try:
        from ..._support.config import resolve_settings

        settings = resolve_settings({"timeout": timeout} if timeout is not None else {})
        await_serving(allocation, schedfile, wait_queue, settings.timeout)
        worker_request = Request(nodes=1, tasks_per_node=1, time=request.time,
                                 partition=partition, account=account,
                                 memory=request.memory, gpus=gpus, name=f"{job_name}-w",
                                 directives=tuple(directives))
        executor = AllocatedExecutor(allocation, schedfile, timeout=timeout,
                                     serve_command=[interpreter, "-m", "hpcfutures", "join",
                                                    str(schedfile)],
                                     worker_request=worker_request, cluster=cluster,
                                     idle_timeout=None if idle_timeout is None
                                     else to_seconds(idle_timeout))
        if request.tasks > 1:  # task 0 serves; else one process with local workers
            executor.workers_expected = request.tasks - 1 + sum(c.tasks for c in separate)
        executor._submit_components(separate)
        return executor
    except BaseException:  # Ctrl-C included: nothing may stay in the queue
        allocation.cancel()
        if cluster is not None:
            cluster.close()
        raise

