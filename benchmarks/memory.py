"""The client's memory and large maps: hpcfutures on the laptop default beside the standard library.

    python benchmarks/memory.py [--quick] [--submits N] [--map-calls N] [--endless S]
                                [--journal-calls N] [--only PART ...] [--json FILE]

Issue 26's client-side targets, each measured in a fresh process (so that one
measurement's garbage is not the next one's baseline), the peer in the same run:

* ``submit`` of N calls held at once (10⁶): the client's memory over the same
  executor idle, and the submit rate of the first and of the last tenth (it
  must not fall as calls accumulate);
* ``map`` of M trivial calls (10⁷) with default arguments: time and peak memory
  over idle, beside ``ProcessPoolExecutor`` with the best ``chunksize`` tried;
* ``map(fn, endless, buffersize=1000)`` consumed for S seconds (60): memory
  after the first tenth and at the end (flat: the map holds ~1,000 items);
* a journal of J results (10⁷), hpcfutures only: ``map(fn, range(J))`` with
  ``journal=`` records them (timed), then in a fresh process the same map is
  run again, every result found in the journal: time to the first result and
  to the last, and peak memory (targets: 5 s, 20 s, 1.5 GiB).

Prints a Markdown table; ``--json`` keeps every figure.  Exit status 1 when an
hpcfutures measurement failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: ProcessPoolExecutor's chunk sizes tried for the large map; the best one is reported.
CHUNKSIZES = (1_000, 10_000, 100_000)
#: The endless map's buffersize (the issue's example).
BUFFERSIZE = 1000
WORKERS = 2
#: Where the held submits' gate file is (set for the executor's workers to inherit).
GATE_VARIABLE = "HPCFUTURES_BENCH_MEMORY_GATE"
#: The measurements, in the order they run (``--only``).
PARTS = ("submit", "map", "endless", "journal")


def noop(x: int) -> int:
    return x


def rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss / 2**20)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_s() -> float:
    """This process's CPU time, every thread: on a shared machine, what the wall time
    would be if the process had a core to itself (the client's work is one core's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def executor(side: str) -> Any:
    if side == "hpcfutures":
        import hpcfutures

        return hpcfutures.Executor(max_workers=WORKERS)
    import concurrent.futures as cf

    return cf.ProcessPoolExecutor(WORKERS)


def settle(ex: Any) -> None:
    """Run a few calls, so that the idle figure includes a started executor."""
    assert list(ex.map(noop, range(100))) == list(range(100))


def gated(x: int) -> int:
    """``x``, once the gate file exists: every call submitted is still held then."""
    gate = os.environ[GATE_VARIABLE]
    while not os.path.exists(gate):
        time.sleep(0.005)
    return x


def measure_submit(side: str, calls: int) -> dict[str, Any]:
    """Submit ``calls`` calls that all wait at a gate, opened once the last is submitted:
    the rate is the client's own cost as the held calls accumulate (results coming back
    meanwhile would compete with the submitting thread for the interpreter)."""
    gate = Path(tempfile.mkdtemp(prefix="hpcf-memory-")) / "open"
    os.environ[GATE_VARIABLE] = str(gate)  # before the workers start: they inherit it
    with executor(side) as ex:
        settle(ex)
        idle = rss_mb()
        tenth = max(calls // 10, 1)
        futures = []
        began = time.perf_counter()
        first_tenth = last_began = 0.0
        for n in range(calls):
            if n == tenth:
                first_tenth = time.perf_counter() - began
            if n == calls - tenth:
                last_began = time.perf_counter()
            futures.append(ex.submit(gated, n))
        last_tenth = time.perf_counter() - last_began
        held = rss_mb() - idle
        assert sum(f.done() for f in futures) == 0, "a held call finished before the gate opened"
        gate.touch()
        assert [f.result() for f in futures] == list(range(calls))
        took = time.perf_counter() - began
    gate.unlink()
    gate.parent.rmdir()
    return {"held_mb": held, "first_rate": tenth / first_tenth, "last_rate": tenth / last_tenth,
            "seconds": took}


def measure_map(side: str, calls: int, chunksize: int) -> dict[str, Any]:
    with executor(side) as ex:
        settle(ex)
        idle = rss_mb()
        began = time.perf_counter()
        total = 0
        for n, value in enumerate(ex.map(noop, range(calls), chunksize=chunksize)):
            total += value == n
        took = time.perf_counter() - began
        assert total == calls
    return {"seconds": took, "peak_over_idle_mb": peak_mb() - idle, "chunksize": chunksize}


def measure_endless(side: str, seconds: float) -> dict[str, Any]:
    if side == "processpool" and sys.version_info < (3, 14):
        return {"unavailable": "its map has buffersize= from Python 3.14 on"}
    with executor(side) as ex:
        settle(ex)
        idle = rss_mb()
        began = time.perf_counter()
        early = half = None
        consumed = 0
        for value in ex.map(noop, itertools.count(), buffersize=BUFFERSIZE):
            consumed = value + 1
            spent = time.perf_counter() - began
            if early is None and spent > seconds / 10:
                early = rss_mb() - idle
            if half is None and spent > seconds / 2:
                half = rss_mb() - idle
            if spent > seconds:
                break
        late = rss_mb() - idle
    return {"early_mb": early, "half_mb": half, "late_mb": late, "consumed": consumed}


def measure_journal(kind: str, calls: int, directory: str) -> dict[str, Any]:
    """``journal-build``: a map recording ``calls`` results in a new journal;
    ``journal``: the same map again, on a new executor (every result recorded)."""
    import hpcfutures

    with hpcfutures.Executor(max_workers=WORKERS, journal=directory) as ex:
        settle(ex)
        idle = rss_mb()
        began, cpu = time.perf_counter(), cpu_s()
        results = ex.map(noop, range(calls))
        first = next(results)
        to_first = time.perf_counter() - began
        total = 1 + sum(value == n for n, value in enumerate(results, 1))
        took, cpu = time.perf_counter() - began, cpu_s() - cpu
        assert first == 0 and total == calls, (first, total)
    return {"first_s": to_first, "seconds": took, "cpu_s": cpu,
            "peak_over_idle_mb": peak_mb() - idle, "peak_mb": peak_mb(), "idle_mb": idle}


def one(kind: str, side: str, size: float, chunksize: int,
        directory: str | None = None) -> dict[str, Any]:
    if kind.startswith("journal"):
        assert directory is not None
        return measure_journal(kind, int(size), directory)
    if kind == "submit":
        return measure_submit(side, int(size))
    if kind == "map":
        return measure_map(side, int(size), chunksize)
    return measure_endless(side, size)


def run_one(kind: str, side: str, size: float, chunksize: int = 1,
            timeout: float = 1800, directory: str | None = None) -> dict[str, Any]:
    """One measurement in a fresh interpreter; its figures, or its error."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "benchmarks.memory", "--one", kind, side, str(size),
               str(chunksize)] + ([] if directory is None else ["--journal-dir", directory])
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    def cell(key: str, fmt: str) -> str:
        got = results.get(key)
        if got is None:
            return "not measured"
        if "error" in got:
            return f"failed: {got['error']}"
        if "unavailable" in got:
            return f"— ({got['unavailable']})"
        return fmt.format(**got)

    rows = [
        (f"{args.submits:,} submits held: client memory over idle, MB",
         cell("submit-hpcfutures", "{held_mb:.0f}"), cell("submit-processpool", "{held_mb:.0f}")),
        ("  submits a second: first tenth / last tenth",
         cell("submit-hpcfutures", "{first_rate:,.0f} / {last_rate:,.0f}"),
         cell("submit-processpool", "{first_rate:,.0f} / {last_rate:,.0f}")),
        ("  all done, s", cell("submit-hpcfutures", "{seconds:.1f}"),
         cell("submit-processpool", "{seconds:.1f}")),
        (f"map of {args.map_calls:,} trivial calls, s (ProcessPool: best chunksize)",
         cell("map-hpcfutures", "{seconds:.1f}"),
         cell("map-processpool", "{seconds:.1f} (chunksize {chunksize:,})")),
        ("  peak client memory over idle, MB", cell("map-hpcfutures", "{peak_over_idle_mb:.0f}"),
         cell("map-processpool", "{peak_over_idle_mb:.0f}")),
        (f"endless map, buffersize={BUFFERSIZE}, {args.endless:g} s: memory over idle "
         "after a tenth / half / at the end, MB",
         cell("endless-hpcfutures", "{early_mb:.0f} / {half_mb:.0f} / {late_mb:.0f}"),
         cell("endless-processpool", "{early_mb:.0f} / {half_mb:.0f} / {late_mb:.0f}")),
        ("  calls consumed", cell("endless-hpcfutures", "{consumed:,}"),
         cell("endless-processpool", "{consumed:,}")),
        (f"journal of {args.journal_calls:,} results: the map that records them, s",
         cell("journal-build", "{seconds:.1f}"), "—"),
        ("  the same map rerun, every result from the journal: first result / all, s "
         "(target 5 / 20)", cell("journal-rerun", "{first_s:.2f} / {seconds:.1f}"), "—"),
        ("  rerun's CPU time in the client (all its threads), s",
         cell("journal-rerun", "{cpu_s:.1f}"), "—"),
        ("  rerun's peak client memory: over idle / in all, MB (target 1,536)",
         cell("journal-rerun", "{peak_over_idle_mb:,.0f} / {peak_mb:,.0f}"), "—"),
    ]
    lines = ["| | hpcfutures (laptop, 2 workers) | ProcessPoolExecutor(2) |", "|---|---|---|"]
    lines += [f"| {name} | {ours} | {theirs} |" for name, ours, theirs in rows
              if ours != "not measured"]  # left out by --only
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=1_000_000)
    parser.add_argument("--map-calls", type=int, default=10_000_000)
    parser.add_argument("--endless", type=float, default=60.0, help="seconds of endless map")
    parser.add_argument("--journal-calls", type=int, default=10_000_000,
                        help="results in the journal a rerun finds")
    parser.add_argument("--only", action="append", choices=PARTS,
                        help="measure only this (may be repeated); default: all")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", nargs=4, metavar=("KIND", "SIDE", "SIZE", "CHUNKSIZE"),
                        help=argparse.SUPPRESS)  # one measurement, in its own process
    parser.add_argument("--journal-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        kind, side, size, chunksize = args.one
        print(json.dumps(one(kind, side, float(size), int(chunksize), args.journal_dir)),
              flush=True)
        return 0
    if args.quick:
        args.submits, args.map_calls, args.endless = 5_000, 20_000, 2.0
        args.journal_calls = 20_000
    results: dict[str, dict[str, Any]] = {}
    parts = args.only or PARTS
    if "submit" in parts:
        for side in ("hpcfutures", "processpool"):
            results[f"submit-{side}"] = run_one("submit", side, args.submits)
            print(f"# submit {side}: {results[f'submit-{side}']}", file=sys.stderr, flush=True)
    if "map" in parts:
        results["map-hpcfutures"] = run_one("map", "hpcfutures", args.map_calls)
        tries = [run_one("map", "processpool", args.map_calls, size)
                 for size in CHUNKSIZES if size <= max(args.map_calls // 4, 1)]
        good = [t for t in tries if "error" not in t]
        results["map-processpool"] = min(good, key=lambda t: t["seconds"]) if good else tries[0]
        print(f"# map: {results['map-hpcfutures']} / {tries}", file=sys.stderr, flush=True)
    if "endless" in parts:
        for side in ("hpcfutures", "processpool"):
            results[f"endless-{side}"] = run_one("endless", side, args.endless)
            print(f"# endless {side}: {results[f'endless-{side}']}", file=sys.stderr,
                  flush=True)
    if "journal" in parts:
        with tempfile.TemporaryDirectory(prefix="hpcfutures-journal-") as directory:
            for kind in ("journal-build", "journal-rerun"):
                results[kind] = run_one(kind, "hpcfutures", args.journal_calls,
                                        directory=directory)
                print(f"# {kind}: {results[kind]}", file=sys.stderr, flush=True)
    print(table(results, args))
    if args.json:
        args.json.write_text(json.dumps({"sizes": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1, default=str))
    ours = [r for k, r in results.items() if "processpool" not in k]
    return 1 if any("error" in r for r in ours) else 0


if __name__ == "__main__":
    sys.exit(main())
