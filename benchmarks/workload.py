"""The benchmark workload: the same steps for every executor, through ``concurrent.futures`` only.

A job script (``benchmarks/jobs/*.py``) builds its executor the way its library documents, then
calls :func:`run_workload`, which times each step, checks each result and prints one line

    BENCH {"t_ready": ..., "t_last": ..., "phases": {...}, "errors": [...]}

on the client's standard output.  Times named ``t_*`` are wall-clock (``time.time()``) so that the
harness can compare them with the launcher's start (``BENCH_T0``) and return; step durations are
measured with ``time.perf_counter()``.

Steps (``QUICK``-sized when ``BENCH_QUICK=1``):

1. ready       the executor's set-up plus one ``submit(inc, 0).result()``: the first moment the
               client has demonstrably run something;
2. map         ``list(ex.map(inc, range(N)))``;
3. map_chunked the same with ``chunksize=64`` (skipped where the executor ignores chunksize);
               median of 5 calls, since one call takes only milliseconds;
4. submit      ``[f.result() for f in [ex.submit(inc, i) for i in range(N)]]``;
   raw_submit  (Dask peers only) the same with ``client.submit`` and ``client.gather``;
5. sleep       ``list(ex.map(sleep10ms, range(S)))``;
6. payload     ``ex.submit(identity, payload).result()`` with a ``PAYLOAD_MIB`` bytes object;
7. short_sleep ``list(ex.map(sleep1ms, range(S1)))``: 1 ms calls, too short to send alone and
               too long to send all at once (issue 21);
8. large_map   ``list(ex.map(inc, range(L)))``, default arguments: hpcfutures only
               (``large_default``), since it is where hpcfutures chooses the chunks itself;
               the peers' unchunked map would take some 20 s here (one message per call);
   large_map_chunked  the same with ``chunksize=64``, for every executor that heeds it.
Both large maps count the median of :data:`LARGE_REPEATS` calls.
9. round_trip  ``ex.submit(inc, i).result()`` in a loop, one call at a time (an optimiser's
               ask/tell loop, a chain the client must look at): each call's latency, median
               and 90th percentile, in ms.

An executor that starts a process per call (executorlib's default) runs only steps 1 and 9,
the latter with ``process_round_trips`` calls (:func:`run_round_trips`): at ~12 calls/s the
other steps' 6,200 calls would take 9 minutes, and 300 round trips, at 0.24 s each, over a
minute (several on a loaded machine).

MPI tasks (issue 20) have their own two jobs, each printing the same kind of line:
``mpi_calls`` is calls per second of a 2-rank call that does one ``allreduce`` and nothing
else, through ``hpcfutures.mpi_task`` (:func:`run_mpi_calls`, 2 workers) or started as
``mpiexec -n 2 python -c ...`` per call (:func:`run_mpiexec_per_call`).

Only this module's functions are sent to workers, so it must be importable there: the harness
puts the repository's root on ``PYTHONPATH`` (``benchmarks.workload``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Sizes", "identity", "inc", "mpi_noop", "report", "run_journal_workload",
           "run_mpi_calls", "run_mpiexec_per_call", "run_round_trips", "run_workload",
           "sizes_from_env", "sleep1ms", "sleep10ms"]

#: Prefix of the line the client prints with its measurements.
BENCH_PREFIX = "BENCH "
#: Environment variables set by the harness.
T0_VAR = "BENCH_T0"
QUICK_VAR = "BENCH_QUICK"
CHUNKSIZE = 64
#: The chunked map takes milliseconds: its figure is the median of this many calls.
CHUNKED_REPEATS = 5
#: The large maps take a fraction of a second each: median of this many calls.
LARGE_REPEATS = 3


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work each step does."""

    trivial: int = 2000        # tasks in the map / submit steps
    sleeps: int = 200          # 10 ms tasks
    payload_mib: int = 40      # size of the bytes argument sent and returned
    journal_sleeps: int = 2000  # 10 ms tasks mapped with a journal and without
    journal_rerun: int = 100_000  # trivial calls found in the journal by a rerun
    mpi_calls: int = 200       # 2-rank MPI calls through hpcfutures.mpi_task
    mpi_launches: int = 10     # the same call, each its own mpiexec -n 2
    short_sleeps: int = 2000   # 1 ms tasks
    large: int = 100_000       # trivial calls in the large maps
    round_trips: int = 300     # submit(...).result() one at a time
    process_round_trips: int = 30  # the same where each call starts a process


QUICK = Sizes(trivial=200, sleeps=20, payload_mib=1, journal_sleeps=200, journal_rerun=2000,
              mpi_calls=20, mpi_launches=2, short_sleeps=40, large=1000, round_trips=30,
              process_round_trips=5)


def sizes_from_env(environ=os.environ) -> Sizes:
    """Full sizes, or the reduced ones when the harness runs with ``--quick``."""
    return QUICK if environ.get(QUICK_VAR) == "1" else Sizes()


# --------------------------------------------------------------- the tasks
def inc(x: int) -> int:
    return x + 1


def sleep10ms(x: int) -> int:
    time.sleep(0.01)
    return x


def sleep1ms(x: int) -> int:
    time.sleep(0.001)
    return x


def identity(x: Any) -> Any:
    return x


def mpi_noop(comm: Any, x: int) -> int:
    """The MPI call of both MPI jobs: one allreduce over the call's ranks."""
    return comm.allreduce(1)


#: The same call as a program of its own, for ``mpiexec -n 2 python -c``.
MPI_NOOP_PROGRAM = ("from mpi4py import MPI\n"
                    "assert MPI.COMM_WORLD.allreduce(1) == 2\n")


# --------------------------------------------------------------- the steps
class Recorder:
    """Collects wall-clock marks, step durations and failed checks."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.phases: dict[str, dict[str, float]] = {}
        self.errors: list[str] = []

    def mark(self, name: str) -> None:
        self.marks[f"t_{name}"] = time.time()

    def step(self, name: str, action: Callable[[], Any], check: Callable[[Any], bool],
             tasks: int | None = None, repeats: int = 1) -> None:
        """Time ``action()``; record seconds (and tasks/s); a wrong result or error is recorded.

        With ``repeats`` the action runs that many times and the median counts:
        for steps of a few milliseconds, where one scheduling hiccup would
        otherwise decide the figure.
        """
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            try:
                value = action()
            except Exception as err:  # a failing step is reported, the others still run
                self.errors.append(f"{name}: {type(err).__name__}: {err}")
                return
            times.append(time.perf_counter() - started)
            if not check(value):
                break
        seconds = sorted(times)[len(times) // 2]
        if not check(value):
            self.errors.append(f"{name}: wrong result")
            return
        entry = {"seconds": seconds, "elapsed": sum(times)}
        if tasks:
            entry["tasks_per_s"] = tasks / seconds
        self.phases[name] = entry

    def round_trips(self, ex: Any, calls: int) -> None:
        """Step 9: the latency of one call at a time, from ``submit`` to its result."""
        latencies = []
        started = time.perf_counter()
        for i in range(calls):
            began = time.perf_counter()
            try:
                value = ex.submit(inc, i).result()
            except Exception as err:
                self.errors.append(f"round_trip: {type(err).__name__}: {err}")
                return
            latencies.append(time.perf_counter() - began)
            if value != i + 1:
                self.errors.append("round_trip: wrong result")
                return
        latencies.sort()
        self.phases["round_trip"] = {
            "seconds": latencies[len(latencies) // 2],
            "p90": latencies[min(int(len(latencies) * 0.9), len(latencies) - 1)],
            "elapsed": time.perf_counter() - started}


def run_workload(ex, rec: Recorder, *, sizes: Sizes, chunksize_supported: bool = True,
                 raw_client: Any = None, large_default: bool = False) -> None:
    """Run steps 1-8 on ``ex`` (already created; ``rec`` holds its ``t_executor`` mark)."""
    rec.step("first_task", lambda: ex.submit(inc, 0).result(), lambda v: v == 1)
    rec.mark("ready")
    n = sizes.trivial
    expected = list(range(1, n + 1))
    rec.step("map", lambda: list(ex.map(inc, range(n))), expected.__eq__, n)
    if chunksize_supported:
        rec.step("map_chunked", lambda: list(ex.map(inc, range(n), chunksize=CHUNKSIZE)),
                 expected.__eq__, n, repeats=CHUNKED_REPEATS)

    def submit_loop():
        fs = [ex.submit(inc, i) for i in range(n)]
        return [f.result() for f in fs]

    rec.step("submit", submit_loop, expected.__eq__, n)
    if raw_client is not None:
        def raw_submit_loop():
            fs = [raw_client.submit(inc, i, pure=False) for i in range(n)]
            return raw_client.gather(fs)

        rec.step("raw_submit", raw_submit_loop, expected.__eq__, n)
    s = sizes.sleeps
    rec.step("sleep", lambda: list(ex.map(sleep10ms, range(s))), list(range(s)).__eq__)
    payload = os.urandom(sizes.payload_mib << 20)
    rec.step("payload", lambda: ex.submit(identity, payload).result(), payload.__eq__)
    s1 = sizes.short_sleeps
    rec.step("short_sleep", lambda: list(ex.map(sleep1ms, range(s1))), list(range(s1)).__eq__)
    large = sizes.large
    expected = list(range(1, large + 1))
    if large_default:
        rec.step("large_map", lambda: list(ex.map(inc, range(large))), expected.__eq__, large,
                 repeats=LARGE_REPEATS)
    if chunksize_supported:
        rec.step("large_map_chunked",
                 lambda: list(ex.map(inc, range(large), chunksize=CHUNKSIZE)),
                 expected.__eq__, large, repeats=LARGE_REPEATS)
    rec.round_trips(ex, sizes.round_trips)
    rec.mark("last")


def run_round_trips(ex, rec: Recorder, *, sizes: Sizes) -> None:
    """Steps 1 and 9 only: the first task, then ``process_round_trips`` calls one at a time."""
    rec.step("first_task", lambda: ex.submit(inc, 0).result(), lambda v: v == 1)
    rec.mark("ready")
    rec.round_trips(ex, sizes.process_round_trips)
    rec.mark("last")


def run_journal_workload(make_executor: Callable[..., Any], rec: Recorder, journal: str, *,
                         sizes: Sizes) -> None:
    """The journal's cost and gain (``journal=``, hpcfutures only), three executors in turn:

    journal_off     ``map(sleep10ms, range(journal_sleeps))`` without a journal;
    journal_on      the same map with a fresh journal, which records every result; the same
                    executor then records ``journal_rerun`` trivial calls (not timed);
    journal_rerun   a new executor on that journal: ``list(ex.map(inc, range(journal_rerun)))``,
                    every call found in the journal.
    """
    s, r = sizes.journal_sleeps, sizes.journal_rerun
    with make_executor() as ex:
        rec.step("first_task", lambda: ex.submit(inc, 0).result(), lambda v: v == 1)
        rec.mark("ready")
        rec.step("journal_off", lambda: list(ex.map(sleep10ms, range(s))),
                 list(range(s)).__eq__)
    with make_executor(journal=journal) as ex:
        rec.step("journal_on", lambda: list(ex.map(sleep10ms, range(s))),
                 list(range(s)).__eq__)
        rec.step("journal_record", lambda: list(ex.map(inc, range(r))),
                 list(range(1, r + 1)).__eq__)
    with make_executor(journal=journal) as ex:
        rec.step("journal_rerun", lambda: list(ex.map(inc, range(r))),
                 list(range(1, r + 1)).__eq__)
        rec.mark("last")


def run_mpi_calls(ex, rec: Recorder, *, sizes: Sizes, mpi_task: Callable[..., Any]) -> None:
    """The first task, then ``sizes.mpi_calls`` 2-rank no-op MPI calls through ``ex.map``."""
    rec.step("first_task", lambda: ex.submit(inc, 0).result(), lambda v: v == 1)
    rec.mark("ready")
    n = sizes.mpi_calls
    rec.step("mpi_calls", lambda: list(ex.map(mpi_task(mpi_noop, ranks=2), range(n))),
             lambda values: values == [2] * n, n)
    rec.mark("last")


def run_mpiexec_per_call(rec: Recorder, *, sizes: Sizes) -> None:
    """``sizes.mpi_launches`` times the same call, each started with ``mpiexec -n 2``."""
    import subprocess

    command = ["mpiexec", "-n", "2", sys.executable, "-c", MPI_NOOP_PROGRAM]

    def launches() -> list[int]:
        return [subprocess.run(command, timeout=60, check=False).returncode
                for _ in range(sizes.mpi_launches)]

    rec.mark("executor")
    rec.mark("ready")  # nothing to set up: every call starts its own job
    rec.step("mpi_calls", launches, lambda codes: codes == [0] * sizes.mpi_launches,
             sizes.mpi_launches)
    rec.mark("last")


def report(rec: Recorder, **extra: Any) -> None:
    """Print the one ``BENCH`` line the harness reads (call just before leaving the ``with``)."""
    record = {**rec.marks, "phases": rec.phases, "errors": rec.errors,
              "pid": os.getpid(), **extra}
    sys.stdout.write(BENCH_PREFIX + json.dumps(record) + "\n")
    sys.stdout.flush()
