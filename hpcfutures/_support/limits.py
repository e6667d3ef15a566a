"""Open files: every process of a launch raises its soft ``RLIMIT_NOFILE`` to the hard one.

The scheduler holds two connections per worker rank, and one more per worker
after any broadcast (``client.run``, the initializer): about three file
descriptors per worker rank.  Clusters commonly give jobs a *soft* limit of
1024 (Slurm passes the submitting shell's on) under a much higher *hard*
limit, so a scheduler that keeps the soft one runs out near 500 workers.
Tornado's accept loop then fails with ``EMFILE`` on every turn of the event
loop: a busy scheduler that logs without end while the workers time out.
Dask's own ``dask scheduler`` command raises the limit; hpcfutures builds its
scheduler in-process, so it does it here, for every role: a worker and the
client need few descriptors, but raising costs nothing, and a task may open
files of its own.

Only the soft limit moves (any process may raise it up to the hard one).  The
hard limit is the site's: when even that is too low for the launch, the
scheduler says so in one WARNING, with the numbers and what to ask for,
instead of failing later in a way that points nowhere near the cause.
"""

from __future__ import annotations

import dataclasses
import logging
import sys

try:
    import resource
except ImportError:  # pragma: no cover - Windows: no rlimits, nothing to raise
    resource = None  # type: ignore[assignment]

__all__ = ["OpenFiles", "client_connections", "descriptors_needed", "raise_open_files_limit"]

logger = logging.getLogger("hpcfutures")

#: Descriptors the scheduler holds per worker rank: its two connections into
#: the scheduler, plus the pooled one a broadcast to every worker leaves.
PER_WORKER = 3
#: Descriptors a process holds whatever the launch's size: the listening
#: sockets, the client's connections, log files, the interpreter's own.
BASE = 64
#: macOS refuses a soft RLIMIT_NOFILE above ``OPEN_MAX`` (<sys/syslimits.h>)
#: where the kernel's own per-process maximum is lower, and reports the hard
#: limit as ``RLIM_INFINITY`` by default: setrlimit() then fails with EINVAL.
MACOS_OPEN_MAX = 10240
#: Where the hard limit is "unlimited" elsewhere (the BSDs): the first value to try.
#: Linux never reports an unlimited hard limit for open files (``fs.nr_open`` caps it).
UNLIMITED_TRY = 1 << 20
#: Dask's pool of connections from a client to the workers keeps at most this many
#: open (``Client(connection_limit=...)``'s default).
DASK_CLIENT_POOL = 512


@dataclasses.dataclass(frozen=True)
class OpenFiles:
    """This process's open-files limits: ``was`` the soft limit found, ``soft``
    the one it has now, ``hard`` the hard one (``None``: unlimited)."""

    was: int
    soft: int
    hard: int | None

    @property
    def raised(self) -> bool:
        return self.soft > self.was


def descriptors_needed(ranks: int) -> int:
    """File descriptors the scheduler of a launch of ``ranks`` ranks needs, about."""
    return BASE + PER_WORKER * max(int(ranks), 1)


def client_connections(ranks: int) -> int:
    """Connections the client keeps open to workers: one per worker rank of a launch of
    ``ranks``, within half this process's open-files limit, and never fewer than Dask's.

    The client fetches each result from the worker that holds it.  With Dask's 512 and
    more workers than that, the pool closes one connection to open the next, so every
    batch of results would open TLS connections anew, and handshakes (about 2 ms of
    CPU each) would take a large share of the client's CPU (``benchmarks/scale.py``).
    """
    soft = UNLIMITED_TRY
    if resource is not None:
        try:
            found = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):  # pragma: no cover - no such limit here
            found = -1
        if not _unlimited(found):
            soft = found
    return max(DASK_CLIENT_POOL, min(BASE + max(int(ranks), 1), soft // 2))


def _unlimited(value: int) -> bool:
    return resource is not None and (value == resource.RLIM_INFINITY or value < 0)


def _candidates(hard: int) -> list[int]:
    """Soft limits to try, best first: the hard one, then what the platform takes."""
    tries = [UNLIMITED_TRY if _unlimited(hard) else hard]
    if sys.platform == "darwin":
        tries.append(min(tries[0], MACOS_OPEN_MAX))
    return tries


def raise_open_files_limit(ranks: int = 1, *, scheduler: bool = False) -> OpenFiles | None:
    """Raise this process's soft open-files limit as far as the hard one allows.

    ``ranks``: the launch's size; ``scheduler``: this process hosts the
    launch's scheduler, and logs a WARNING when the limit it ends up with is
    below :func:`descriptors_needed` for ``ranks``.  Returns the limits (None
    where the platform has none).  Never raises: a limit that cannot be raised
    is kept, and the launch may still fit in it.
    """
    if resource is None:  # pragma: no cover - Windows
        return None
    try:
        was, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no such limit here
        return None
    soft = was
    if not _unlimited(was):
        for target in _candidates(hard):
            if target <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (OSError, ValueError):
                continue  # e.g. macOS above OPEN_MAX: try the next, lower value
            soft = target
            break
    limits = OpenFiles(was=was, soft=soft, hard=None if _unlimited(hard) else hard)
    if limits.raised:
        logger.debug("open files: soft limit raised from %d to %d", was, soft)
    if scheduler:
        _warn_if_short(limits, ranks)
    return limits


def _warn_if_short(limits: OpenFiles, ranks: int) -> None:
    """One WARNING on the scheduler when the launch will not fit in its open files."""
    if _unlimited(limits.soft):
        return
    needed = descriptors_needed(ranks)
    if limits.soft >= needed:
        return
    if limits.hard is not None and limits.hard < needed:
        why = (f"and that is its hard limit (`ulimit -Hn` says {limits.hard}), which only "
               "the site can raise: its administrators set it (/etc/security/limits.conf, "
               "or the limits slurmd runs with: Slurm's PropagateResourceLimits passes the "
               "submitting shell's limits on to the job, within those)")
    else:
        why = ("and it could not raise its soft limit further (the hard limit is "
               f"{'unlimited' if limits.hard is None else limits.hard})")
    logger.warning(
        "this launch has %d ranks, and its scheduler needs about %d open files (%d per "
        "worker rank, plus %d) but may open only %d, %s. Past %d it cannot accept "
        "connections, and workers fail to join. Start the launch where `ulimit -n %d` "
        "works (a job script can run it before srun/mpiexec, up to the hard limit), or "
        "launch fewer ranks", ranks, needed, PER_WORKER, BASE, limits.soft, why,
        limits.soft, needed)
