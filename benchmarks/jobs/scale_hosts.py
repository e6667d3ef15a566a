"""Many worker ranks in one process, for ``benchmarks/scale.py``.

A real launch of 2,000 ranks needs 2,000 processes, each a second of CPU to
import ``distributed``: more than a 2-core machine can start in a minute.
What a large launch puts on its scheduler and its filesystem does not come
from those processes, though, but from what each rank does once started.  So
each rank hosted here runs exactly the worker role's code
(``hpcfutures._launch``): its identity from the ``hpcfutures run`` launcher
plug-in, the scheduler-file lookup, the probe, the join (with its knocks), a
Dask worker with hpcfutures' plug-ins, heartbeats and the end of the launch.
Left out is only what belongs to a process: signal handlers, GPU pinning and
the exit.  A rank's watcher (the process that tells the scheduler how its
worker died) is per process too, but what the scheduler and the client do
after a death depends on it: a killed rank's watcher sends a certificate
within a second or two, and without one the client waits for it (8 s and
more) before running the lost calls again.  So each host has one companion
process (``watchers``), outside its process group, that stands in for its
ranks' watchers: each hosted worker hands it what it would hand its own
watcher, and when the host dies without saying goodbye the companion sends
the scheduler one certificate per hosted worker, each over its own
connection and all at once, as that many watchers would (after one import
of Dask where each watcher imports it for itself, in parallel on its node).

    python -m benchmarks.jobs.scale_hosts hpcfutures --first 2 --count 200 --size 2002 \\
        --launch-id ID --scheduler-file F --report OUT.json
    python -m benchmarks.jobs.scale_hosts watchers       (started by the first, stdin a pipe)
    python -m benchmarks.jobs.scale_hosts dask --count 200 --scheduler-file F \\
        --credentials CREDS.json --report OUT.json

The third is the same number of plain Dask workers in one process, for
comparison.  Each host prints ``WAITING`` once all its ranks look for the
scheduler, and writes its report when all of them have ended.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

#: Reads of the scheduler file, per rank: (rank, monotonic time).
READS: list[tuple[int, float]] = []


def _count_reads() -> None:
    """Note every read of the scheduler file, and by which rank."""
    from hpcfutures.launchers._schedfile import SchedulerFileExchange

    read = SchedulerFileExchange._read_quietly

    def counted(self: SchedulerFileExchange) -> Any:
        READS.append((self.rank, time.monotonic()))
        return read(self)

    SchedulerFileExchange._read_quietly = counted  # type: ignore[method-assign]


async def host_hpcfutures(args: argparse.Namespace) -> dict[str, Any]:
    from hpcfutures import _dask
    from hpcfutures._launch.lookup import find_scheduler
    from hpcfutures._launch.plan import bind_address, negotiate
    from hpcfutures._launch.worker_side import join_and_serve
    from hpcfutures._support.config import resolve_settings
    from hpcfutures._support.patience import Patience
    from hpcfutures.launchers.run import LAUNCH_ID_VAR, RANK_VAR, SIZE_VAR

    _count_reads()
    companion = _stand_in_for_watchers()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    waiting_since: dict[int, float] = {}
    found_at: dict[int, float] = {}
    outcomes: dict[int, str] = {}
    started = asyncio.Event()
    looking: set[int] = set()

    def looks(number: int) -> None:
        looking.add(number)
        if len(looking) == args.count:
            started.set()

    async def rank(number: int) -> None:
        environ = {RANK_VAR: str(number), SIZE_VAR: str(args.size),
                   LAUNCH_ID_VAR: args.launch_id, "HPCFUTURES_SCHEDULER_FILE": args.scheduler_file}
        try:
            settings = resolve_settings({"timeout": args.timeout}, environ=environ)
            plan = negotiate(settings, environ)
            host, interface = bind_address(settings, plan.identity)
            timeout = plan.launcher.lookup_timeout(plan.identity)
            waiting_since[number] = time.monotonic()
            looks(number)
            info = await find_scheduler(_dask, plan.peers_exchange, timeout, may_be_late=True,
                                        patience=Patience.for_launch(args.size, timeout),
                                        spread=True)
            found_at[number] = time.monotonic()
            status = await join_and_serve(_dask, settings, plan, info, host, interface,
                                          timeout, stop, watch=True)
            outcomes[number] = f"exit {status}"
        except Exception as err:  # a rank that fails is a finding, not a crash of the host
            outcomes[number] = f"{type(err).__name__}: {err}"
            looks(number)

    def where_they_are() -> None:  # SIGUSR1, from the harness when a launch stalls
        numbers = range(args.first, args.first + args.count)
        print("PHASES", json.dumps({
            "looking": [n for n in numbers if n not in found_at and n not in outcomes],
            "joining or serving": sum(n in found_at and n not in outcomes for n in numbers),
            "outcomes": _tally(outcomes.values())}), file=sys.stderr, flush=True)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, where_they_are)
    ranks = [asyncio.ensure_future(rank(n)) for n in range(args.first, args.first + args.count)]
    await started.wait()
    print("WAITING", flush=True)
    await asyncio.gather(*ranks)
    companion.goodbye()
    return {"outcomes": _tally(outcomes.values()), "file_reads": _read_rates(waiting_since,
                                                                             found_at)}


class _Companion:
    """The pipe to the process that stands in for this host's ranks' watchers."""

    def __init__(self) -> None:
        import subprocess

        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.jobs.scale_hosts", "watchers"],
            stdin=subprocess.PIPE, start_new_session=True)  # outlives the host's group

    def watch(self, report: dict[str, Any], keep_fds: tuple[int, ...] = ()) -> bool:
        """In place of ``deathwatch.start_watcher``, for each hosted worker."""
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps({**report, "pid": os.getpid()}).encode() + b"\n")
        stdin.flush()
        return True

    def goodbye(self) -> None:
        """The ranks left on purpose: nothing to report."""
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(b"goodbye\n")
        stdin.close()


def _stand_in_for_watchers() -> _Companion:
    from hpcfutures._remote import deathwatch

    companion = _Companion()
    deathwatch.start_watcher = companion.watch  # type: ignore[assignment]
    return companion


def watchers() -> None:
    """The companion: read the hosted workers' reports until the host's pipe closes;
    if it closed without a goodbye, report every one as killed from outside.

    It imports Dask before the death, where a real watcher imports it after:
    about a second on the core its dead worker left free, on each node at once.
    Here the one import would share a core with hundreds of busy hosted workers
    (15-20 s at 2,000), which is the harness's cost, not a launch's.
    """
    from hpcfutures._dask.deaths import report_death
    from hpcfutures._remote.watcher import REPORT_TIMEOUT, certificate, last_words

    lines = sys.stdin.buffer.read().splitlines()
    configs = [json.loads(line) for line in lines if line.startswith(b"{")]
    if not configs or b"goodbye" in lines:
        return

    async def report_all() -> list[Any]:
        return await asyncio.gather(*(
            report_death(config["address"], certificate(config, last_words(b""), []),
                         float(config.get("report_timeout") or REPORT_TIMEOUT),
                         config.get("credentials"))
            for config in configs), return_exceptions=True)

    started = time.monotonic()
    outcomes = asyncio.run(report_all())
    said = _tally("accepted" if outcome is True else repr(outcome)[:120] for outcome in outcomes)
    print(f"STAND-IN WATCHERS reported {len(configs)} deaths in "
          f"{time.monotonic() - started:.1f} s: {said}", file=sys.stderr, flush=True)


def _read_rates(waiting_since: dict[int, float], found_at: dict[int, float]) -> dict[str, Any]:
    """Reads of the scheduler file per waiting rank per second after its first 10 s,
    and the shortest time between two such reads of one rank (the rule: at most
    one a second; a rate over a short window would count a read the first 10 s
    had scheduled)."""
    late_reads, late_seconds, shortest = 0, 0.0, None
    by_rank: dict[int, list[float]] = {}
    for who, when in READS:
        by_rank.setdefault(who, []).append(when)
    for number, asked in waiting_since.items():
        # A rank's first 10 s count from its own first read: counted from the
        # moment before its lookup began, a read due 9.999 s into the rank's
        # quick looks (the next one 0.5 s later) fell into the window, and the
        # shortest gap read 0.54 s at 2,000 ranks with no rank breaking the rule.
        since = max([asked, *by_rank.get(number, ())[:1]])
        end = found_at.get(number)
        if end is None or end - since <= 11.0:
            continue
        late = [when for when in by_rank.get(number, ()) if since + 10.0 <= when < end]
        late_reads += len(late)
        late_seconds += end - since - 10.0
        for before, after in itertools.pairwise(late):
            gap = after - before
            shortest = gap if shortest is None else min(shortest, gap)
    return {"reads": late_reads, "rank_seconds": late_seconds, "shortest_gap": shortest}


def _tally(outcomes: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


async def host_dask(args: argparse.Namespace) -> dict[str, Any]:
    """The same number of Dask's own workers, joining as soon as the file is there."""
    from distributed import Worker
    from distributed.utils import json_load_robust

    security = dask_security(Path(args.credentials))
    loop = asyncio.get_running_loop()
    print("WAITING", flush=True)
    path = Path(args.scheduler_file)
    while not path.exists():  # one reader for the whole process: see scale.py
        await asyncio.sleep(0.01)
    # Dask's scheduler writes its file in place (open, then dump): read as its own
    # workers do, again until the JSON is whole, never once the moment it appears.
    address = json_load_robust(str(path), timeout=args.timeout)["address"]
    workers = [Worker(address, nthreads=1, memory_limit=0, host="127.0.0.1",
                      dashboard=False, security=security, protocol="tls",
                      death_timeout=args.timeout, validate=False)
               for _ in range(args.count)]
    outcomes: dict[int, str] = {}

    async def run(number: int, worker: Worker) -> None:
        try:
            await worker
            await worker.finished()
            outcomes[number] = "exit 0"
        except Exception as err:
            outcomes[number] = f"{type(err).__name__}: {err}"

    loop.add_signal_handler(signal.SIGTERM, lambda: [w.close() for w in workers])
    await asyncio.gather(*(run(n, w) for n, w in enumerate(workers)))
    return {"outcomes": _tally(outcomes.values()), "file_reads": None}


#: A timed map of Dask's side still running at this many times its ideal is given
#: up (``scale_dask_job.py``); ``scale.py``'s deadline allows for it.
CUT_AFTER = 10


def timed_maps(spec: str) -> list[tuple[int, float]]:
    """``"CALLSxSECONDS,..."`` (``scale.py --throughput``): (calls per worker, seconds
    per call) of each map timed against the ideal."""
    return [(int(calls), float(seconds))
            for calls, seconds in (part.split("x") for part in spec.split(",") if part)]


def write_pem_files(credentials: Path) -> None:
    """Write the certificate and key of ``credentials`` beside it, for Dask's Security.

    Done once, by ``scale.py`` before it starts any process: when every hosting
    process wrote them itself on first need, two starting at once raced on the
    exclusive create and one died before saying ``WAITING`` (seen once in CI).
    """
    pem = json.loads(credentials.read_text())
    cert, key = credentials.with_suffix(".crt"), credentials.with_suffix(".key")
    for path, text in ((cert, pem["cert"]), (key, pem["key"])):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)


def dask_security(credentials: Path) -> Any:
    """Dask's Security from the PEM files :func:`write_pem_files` put beside ``credentials``."""
    from distributed import Security

    cert, key = credentials.with_suffix(".crt"), credentials.with_suffix(".key")
    for path in (cert, key):
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: scale.py writes it before it "
                                    "starts the processes that read it")
    return Security(require_encryption=True, tls_ca_file=str(cert),
                    tls_client_cert=str(cert), tls_client_key=str(key),
                    tls_scheduler_cert=str(cert), tls_scheduler_key=str(key),
                    tls_worker_cert=str(cert), tls_worker_key=str(key))


async def dask_scheduler(args: argparse.Namespace) -> dict[str, Any]:
    """Dask's own scheduler, as its ``dask scheduler`` command starts it (TLS, a file)."""
    import resource

    from distributed import Scheduler

    # What `dask scheduler` does, and hpcfutures now does too: see _support/limits.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, hard // 2), hard))
    security = dask_security(Path(args.credentials))
    scheduler = Scheduler(host="127.0.0.1", protocol="tls", security=security, dashboard=False,
                          scheduler_file=args.scheduler_file, validate=False)
    await scheduler
    await scheduler.finished()
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["hpcfutures", "dask", "dask-scheduler", "watchers"])
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--launch-id", default="")
    parser.add_argument("--scheduler-file", default="")
    parser.add_argument("--credentials", default="")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    if args.kind == "watchers":
        watchers()
        return
    if args.kind != "dask-scheduler":  # hundreds of workers' connections in one process
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    run = {"hpcfutures": host_hpcfutures, "dask": host_dask, "dask-scheduler": dask_scheduler}
    report = asyncio.run(run[args.kind](args))
    if args.report:
        Path(args.report).write_text(json.dumps(report))
    sys.stdout.flush()
    os._exit(0)  # hundreds of closed workers need no interpreter teardown


if __name__ == "__main__":
    main()
