"""The floors under issue 21's targets: what this machine costs before any executor's work.

``benchmarks/run.py`` compares executors; this script measures what none of them can go
below here, so that a target that is out of reach is shown to be, not just said to be:

* **1 ms calls.**  ``time.sleep(0.001)`` a thousand times alone, against the same sleeps
  timed inside the calls of ``map(nap, range(2000))`` on two workers (hpcfutures' laptop
  default, and ProcessPoolExecutor for comparison).  A worker's own calls already take
  longer than the target's whole map once other processes share the two cores.
* **Ending a process.**  Seconds from a script's last line to its exit: bare Python,
  after ``import distributed``, and after a finished hpcfutures executor.  Interpreter
  teardown of the objects that importing Dask leaves is paid by every process that
  imported it, before any launcher can return.
* **Starting a process.**  CPU seconds of ``import distributed``, hpcfutures' own share
  on top of it, and ``import mpi4py.futures`` (when installed).
* **One round trip.**  ``submit(inc, 1).result()`` on a running executor: the least a
  map pays, whatever its size, with Dask's scheduler in the path.
* **A lone call through Dask's scheduler, four processes.**  The same loop with Dask
  alone: a bare ``Scheduler``, two ``Worker`` processes of one thread and a ``Client``,
  each in its own process and on TLS, as under ``hpcfutures run -n 4``; once with Dask's
  streams as it ships them (a message waits up to 2-10 ms for others to join it) and
  once with every stream sending at once.  Beside it, hpcfutures under
  ``hpcfutures run -n 4`` (``jobs/round_trip_job.py``), whose every call goes through
  the scheduler.  What Dask's own four messages cost here bounds any route through the
  scheduler from below.

Run from the repository's root: ``python benchmarks/floors.py`` (``--quick``: fewer
repetitions, for the test suite; the figures then mean little).  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: (label, code run before the script's last line) for the teardown measurement.
ENDINGS = [
    ("bare Python", "pass"),
    ("after `import distributed`", "import distributed"),
    ("after a finished hpcfutures executor",
     "import hpcfutures\n"
     "with hpcfutures.Executor(max_workers=1) as ex:\n"
     "    ex.submit(abs, -1).result()"),
]


# The calls are defined here rather than taken from benchmarks.workload (which has an
# ``inc`` too): as this script's own functions they travel to the workers by value, so
# the workers need not find the repository on their PYTHONPATH, as the harness sets it.
def nap(i: int) -> tuple[int, float]:
    """One 1 ms call that also says how long it really took, and in which process."""
    started = time.perf_counter()
    time.sleep(0.001)
    return os.getpid(), time.perf_counter() - started


def inc(x: int) -> int:
    return x + 1


def sleeps_alone(n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        time.sleep(0.001)
    return time.perf_counter() - started


def sleeps_in_workers(ex: concurrent.futures.Executor, calls: int) -> tuple[float, float]:
    """(wall seconds of the map, the longest sum of one worker's own call durations)."""
    list(ex.map(inc, range(100)))  # workers up, functions measured
    started = time.perf_counter()
    results = list(ex.map(nap, range(calls)))
    wall = time.perf_counter() - started
    per_worker: dict[int, float] = {}
    for pid, seconds in results:
        per_worker[pid] = per_worker.get(pid, 0.0) + seconds
    return wall, max(per_worker.values())


def seconds_to_exit(code: str) -> float:
    """From the last line of ``code`` to the end of its process (wall seconds)."""
    script = f"{code}\nimport sys, time\nsys.stdout.write(repr(time.time()) + '\\n')\n" \
             "sys.stdout.flush()\n"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdout is not None
    last_line = float(child.stdout.readline())
    child.wait(timeout=120)
    return time.time() - last_line


def import_cpu_seconds(before: str, module: str) -> float | None:
    """CPU seconds of ``import module`` in a fresh process that ran ``before`` first."""
    script = (f"{before}\nimport time\nt = time.process_time()\nimport {module}\n"
              "print(time.process_time() - t)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return float(done.stdout) if done.returncode == 0 else None


def round_trips(submit: Callable[..., Any], n: int, warm: int = 1) -> list[float]:
    """Seconds of each of ``n`` calls ``submit(inc, i).result()``, one at a time, after
    ``warm`` untimed ones (an executor's ``submit``, or a Dask client's)."""
    for i in range(warm):
        submit(inc, i).result()
    times = []
    for i in range(n):
        started = time.perf_counter()
        submit(inc, i).result()
        times.append(time.perf_counter() - started)
    return times


def _streams_send_at_once() -> Any:
    """In this process, Dask's batched streams made from now on send each message at
    once (the floor's second Dask row): a benchmark's change to the process it runs,
    never hpcfutures'.  Returns what puts Dask's own back."""
    import distributed.batched

    made = distributed.batched.BatchedSend.__init__

    def at_once(self: Any, interval: Any, *args: Any, **kwargs: Any) -> None:
        made(self, 0, *args, **kwargs)

    distributed.batched.BatchedSend.__init__ = at_once  # type: ignore[method-assign]
    return made


def _quiet_dask() -> None:
    import logging

    logging.getLogger("distributed").setLevel(logging.WARNING)


def _dask_scheduler(addresses: Any, security: Any, at_once: bool) -> None:
    import asyncio

    from distributed import Scheduler

    _quiet_dask()
    if at_once:
        _streams_send_at_once()

    async def serve() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard=False,
                             security=security, protocol="tls") as scheduler:
            addresses.put(scheduler.address)
            await scheduler.finished()

    asyncio.run(serve())


def _dask_worker(address: str, security: Any, at_once: bool) -> None:
    import asyncio

    from distributed import Worker

    _quiet_dask()
    if at_once:
        _streams_send_at_once()

    async def serve() -> None:
        async with Worker(address, nthreads=1, host="127.0.0.1", security=security) as worker:
            await worker.finished()

    asyncio.run(serve())


def dask_round_trips(n: int, at_once: bool) -> list[float]:
    """``client.submit(inc, i).result()`` with Dask alone: scheduler, two workers and
    the client in four processes, on TLS (Dask's temporary credentials)."""
    import multiprocessing

    from distributed import Client
    from distributed.security import Security

    dasks_own = _streams_send_at_once() if at_once else None
    spawn = multiprocessing.get_context("spawn")
    security = Security.temporary()  # type: ignore[no-untyped-call]
    addresses = spawn.Queue()
    processes = [spawn.Process(target=_dask_scheduler, args=(addresses, security, at_once),
                               daemon=True)]
    processes[0].start()
    try:
        address = addresses.get(timeout=60)
        for _ in range(2):
            processes.append(spawn.Process(target=_dask_worker,
                                           args=(address, security, at_once), daemon=True))
            processes[-1].start()
        with Client(address, security=security) as client:
            client.wait_for_workers(2, timeout=60)
            return round_trips(functools.partial(client.submit, pure=False), n, warm=50)
    finally:
        for process in processes:
            process.kill()
            process.join(timeout=10)
        if dasks_own is not None:
            import distributed.batched

            distributed.batched.BatchedSend.__init__ = dasks_own  # type: ignore[method-assign]


def hpcfutures_round_trips(n: int) -> dict[str, tuple[float, float]]:
    """``jobs/round_trip_job.py`` under ``hpcfutures run -n 4``: way -> (median, best) ms."""
    done = subprocess.run([sys.executable, "-m", "hpcfutures", "run", "-n", "4", sys.executable,
                           str(ROOT / "benchmarks" / "jobs" / "round_trip_job.py"), str(n)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    ways = {}
    for line in done.stdout.splitlines():
        if "ROUND-TRIP " in line:
            way, median, best = line.split("ROUND-TRIP ", 1)[1].split()
            ways[way] = (float(median), float(best))
    if not ways:
        raise RuntimeError(f"hpcfutures run -n 4 jobs/round_trip_job.py printed no round "
                           f"trips (status {done.returncode}):\n{done.stdout}{done.stderr}")
    return ways


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke test)")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else 5
    calls = 200 if args.quick else 2000
    sys.path.insert(0, str(ROOT))
    import hpcfutures

    rows: list[tuple[str, str]] = []
    alone = statistics.median(sleeps_alone(calls // 2) for _ in range(repeat))
    rows.append((f"{calls // 2} x `sleep(0.001)` alone in one process", f"{alone:.3f} s"))
    for label, make in [("hpcfutures `Executor(max_workers=2)`",
                         lambda: hpcfutures.Executor(max_workers=2)),
                        ("ProcessPoolExecutor(2)",
                         lambda: concurrent.futures.ProcessPoolExecutor(2))]:
        with make() as ex:
            figures = [sleeps_in_workers(ex, calls) for _ in range(repeat)]
        wall = statistics.median(f[0] for f in figures)
        own = statistics.median(f[1] for f in figures)
        rows.append((f"map of {calls} x 1 ms on {label}: the busiest worker's own calls",
                     f"{own:.3f} s (map: {wall:.3f} s)"))
    for label, code in ENDINGS:
        ending = statistics.median(seconds_to_exit(code) for _ in range(repeat))
        rows.append((f"last line to exit, {label}", f"{ending:.3f} s"))
    for label, before, module in [("`import distributed`", "", "distributed"),
                                  ("`import hpcfutures` after distributed",
                                   "import distributed", "hpcfutures"),
                                  ("`import mpi4py.futures`", "", "mpi4py.futures")]:
        cpu = [import_cpu_seconds(before, module) for _ in range(repeat)]
        shown = ("not installed" if None in cpu
                 else f"{statistics.median(c for c in cpu if c is not None):.3f} CPU-s")
        rows.append((label, shown))
    with hpcfutures.Executor(max_workers=2) as ex:
        trips = round_trips(ex.submit, 10 if args.quick else 40)
    rows.append(("one round trip, `submit(inc, i).result()` (best / median)",
                 f"{min(trips) * 1000:.1f} / {statistics.median(trips) * 1000:.1f} ms"))
    lone = 40 if args.quick else 400
    for label, at_once in [("as shipped", False), ("every stream sending at once", True)]:
        trips = dask_round_trips(lone, at_once)
        rows.append((f"a lone call through Dask's scheduler, Dask alone in 4 processes "
                     f"(TLS), {label} (best / median)",
                     f"{min(trips) * 1000:.1f} / {statistics.median(trips) * 1000:.1f} ms"))
    ways = hpcfutures_round_trips(lone)
    median, best = ways["scheduler"]
    rows.append(("a lone call under `hpcfutures run -n 4`, through the scheduler "
                 "(best / median)", f"{best:.1f} / {median:.1f} ms"))

    print("| floor | measured |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
