"""Figures from runs, medians, the issue's targets, and the Markdown tables."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping

from .launch import LINGER
from .workload import CHUNKSIZE, Sizes

__all__ = ["Metric", "evaluate_targets", "figures", "markdown", "medians", "metrics", "ratios"]

#: Other work on the CPUs before a run above which the run gets a note.
BUSY_NOTE = 0.5
#: The reference scales of the "200 x 10 ms <= 1.08 s" and "2000 x 1 ms <= 1.10 s" targets
#: (scaled for --quick).
SLEEP_REFERENCE_TASKS = 200
SHORT_SLEEP_REFERENCE_TASKS = 2000


@dataclasses.dataclass(frozen=True)
class Metric:
    key: str
    header: str
    unit: str            # "s", "ms" or "tasks/s"

    @property
    def higher_is_better(self) -> bool:
        return self.unit == "tasks/s"


def metrics(sizes: Sizes) -> list[Metric]:
    """The table's columns, in order."""
    return [
        Metric("ready", "ready s", "s"),
        Metric("map", f"map {sizes.trivial} × `x+1` tasks/s", "tasks/s"),
        Metric("map_chunked", f"same, chunksize={CHUNKSIZE} tasks/s", "tasks/s"),
        Metric("submit", f"submit loop {sizes.trivial} tasks/s", "tasks/s"),
        Metric("raw_submit", "raw Dask `client.submit` tasks/s", "tasks/s"),
        Metric("sleep", f"{sizes.sleeps} × 10 ms s", "s"),
        Metric("payload", f"{sizes.payload_mib} MiB round trip s", "s"),
        Metric("short_sleep", f"{sizes.short_sleeps} × 1 ms s", "s"),
        Metric("large_map", f"map {sizes.large} × `x+1` tasks/s", "tasks/s"),
        Metric("large_map_chunked", f"same, chunksize={CHUNKSIZE} tasks/s", "tasks/s"),
        Metric("journal_ratio", f"{sizes.journal_sleeps} × 10 ms with ÷ without journal", "×"),
        Metric("journal_rerun", f"rerun of {sizes.journal_rerun} journaled calls s", "s"),
        Metric("mpi_calls", "2-rank no-op MPI calls/s", "tasks/s"),
        Metric("round_trip", "`submit(f, x).result()` one at a time, median ms", "ms"),
        Metric("round_trip_p90", "same, 90th percentile ms", "ms"),
        Metric("shutdown", "shutdown s", "s"),
        Metric("total", "total s", "s"),
    ]


def figures(bench: Mapping, t0: float, t_return: float) -> dict[str, float]:
    """One run's figures from the client's BENCH record and the launcher's start/return times."""
    phases = bench.get("phases", {})
    out = {"ready": bench["t_ready"] - t0, "executor": bench["t_executor"] - t0}
    for key in ("map", "map_chunked", "submit", "raw_submit", "mpi_calls", "large_map",
                "large_map_chunked"):
        if key in phases:
            out[key] = phases[key]["tasks_per_s"]
    for key in ("sleep", "payload", "journal_rerun", "short_sleep"):
        if key in phases:
            out[key] = phases[key]["seconds"]
    if "round_trip" in phases:
        out["round_trip"] = phases["round_trip"]["seconds"] * 1e3
        out["round_trip_p90"] = phases["round_trip"]["p90"] * 1e3
    if "journal_on" in phases and "journal_off" in phases:
        out["journal_ratio"] = phases["journal_on"]["seconds"] / phases["journal_off"]["seconds"]
    out["shutdown"] = t_return - bench["t_last"]
    # Every runner's total covers the same steps: less the map only hpcfutures runs.
    out["total"] = t_return - t0 - phases.get("large_map", {}).get("elapsed", 0.0)
    return out


def medians(runs: list[Mapping[str, float]]) -> dict[str, float]:
    keys = sorted({key for run in runs for key in run})
    return {key: statistics.median(run[key] for run in runs if key in run) for key in keys}


# ----------------------------------------------------------------- targets
@dataclasses.dataclass(frozen=True)
class Target:
    """hpcfutures' ``metric`` against ``goal``: a ratio to a peer's ``peer_metric``, or absolute.

    With ``others``, the reference is the best of ``peer`` and those peers (the fastest one).
    """

    label: str
    metric: str
    goal: float
    at_least: bool                 # True: value (or ratio) >= goal; False: <= goal
    peer: str | None = None
    peer_metric: str | None = None
    others: tuple[str, ...] = ()


TARGETS = (
    Target("default map ≥ 1.0× mpi4py.futures (unchunked)", "map", 1.0, True,
           "mpi4py-futures", "map"),
    Target(f"chunksize={CHUNKSIZE} ≥ 1.0× mpi4py.futures (chunksize={CHUNKSIZE})",
           "map_chunked", 1.0, True, "mpi4py-futures", "map_chunked"),
    Target(f"default map of {{large}} ≥ 1.0× the fastest peer (chunksize={CHUNKSIZE})",
           "large_map", 1.0, True, "processpool", "large_map_chunked", ("mpi4py-futures",)),
    Target(f"map of {{large}}, chunksize={CHUNKSIZE} ≥ 1.0× ProcessPoolExecutor (same)",
           "large_map_chunked", 1.0, True, "processpool", "large_map_chunked"),
    Target("{sleeps} × 10 ms ≤ {goal:.3g} s", "sleep", 1.08, False),
    Target("{short_sleeps} × 1 ms ≤ {goal:.3g} s", "short_sleep", 1.10, False),
    Target("submit loop ≥ 1.0× raw Dask submit (SLURMRunner)", "submit", 1.0, True,
           "slurmrunner", "raw_submit"),
    Target("submit loop ≥ 1.0× raw Dask submit (dask-mpi)", "submit", 1.0, True,
           "dask-mpi", "raw_submit"),
    Target("ready ≤ 0.7× SLURMRunner", "ready", 0.7, False, "slurmrunner", "ready"),
    Target("shutdown ≤ 0.1 s", "shutdown", 0.1, False),
    Target("total ≤ 0.5× SLURMRunner", "total", 0.5, False, "slurmrunner", "total"),
    Target("total ≤ 1.0× mpi4py.futures", "total", 1.0, False, "mpi4py-futures", "total"),
    Target("{journal_sleeps} × 10 ms map with a journal ≤ {goal:.3g}× without",
           "journal_ratio", 1.10, False),
    Target("rerun finding {journal_rerun} journaled calls ≤ {goal:.3g} s", "journal_rerun", 1.0,
           False),
    Target("2-rank MPI calls ≥ 100× `mpiexec -n 2` per call", "mpi_calls", 100.0, True,
           "mpiexec-per-call", "mpi_calls"),
    Target("round trip (median) ≤ 1.0× mpi4py.futures", "round_trip", 1.0, False,
           "mpi4py-futures", "round_trip"),
    Target("round trip (median) ≤ 1.0× Parsl", "round_trip", 1.0, False,
           "parsl", "round_trip"),
)


def evaluate_targets(results: Mapping[str, Mapping], sizes: Sizes) -> list[dict]:
    """One entry per target: the reference figure and, per hpcfutures runner, value/ratio/met."""
    hpcf = [name for name, r in results.items() if r["is_hpcfutures"]]
    evaluated = []
    for target in TARGETS:
        goal = target.goal
        if target.metric == "sleep":  # ideal time scales with the number of 10 ms tasks
            goal = target.goal * sizes.sleeps / SLEEP_REFERENCE_TASKS
        if target.metric == "short_sleep":
            goal = target.goal * sizes.short_sleeps / SHORT_SLEEP_REFERENCE_TASKS
        entry = {"target": target.label.format(goal=goal, **dataclasses.asdict(sizes)),
                 "metric": target.metric, "goal": goal, "at_least": target.at_least,
                 "peer": target.peer, "peer_metric": target.peer_metric,
                 "reference": None, "runners": {}}
        if target.peer is not None:
            entry["peer"], entry["reference"] = _reference(results, target)
        for name in hpcf:
            value = results[name].get("medians", {}).get(target.metric)
            compared = value
            if target.peer is not None:
                ref = entry["reference"]
                compared = value / ref if value is not None and ref else None
            met = None if compared is None else (
                compared >= goal if target.at_least else compared <= goal)
            entry["runners"][name] = {"value": value, "compared": compared, "met": met}
        evaluated.append(entry)
    return evaluated


def _reference(results: Mapping[str, Mapping], target: Target) -> tuple[str, float | None]:
    """The peer to compare with and its median: the best of the target's peers that ran."""
    figures = []
    for peer in (target.peer, *target.others):
        value = results.get(peer, {}).get("medians", {}).get(target.peer_metric)
        if value is not None:
            figures.append((value, peer))
    if not figures:
        return str(target.peer), None
    higher_is_better = target.at_least  # "at least N x" compares rates
    value, peer = max(figures) if higher_is_better else min(figures)
    return peer, value


def ratios(results: Mapping[str, Mapping]) -> dict[str, dict[str, dict[str, float]]]:
    """hpcfutures runner -> peer -> metric -> hpcfutures median / peer median."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, mine in results.items():
        if not mine["is_hpcfutures"] or not mine.get("medians"):
            continue
        for peer, theirs in results.items():
            if theirs["is_hpcfutures"] or not theirs.get("medians"):
                continue
            out.setdefault(name, {})[peer] = {
                key: mine["medians"][key] / theirs["medians"][key]
                for key in mine["medians"] if theirs["medians"].get(key)}
    return out


# ----------------------------------------------------------------- Markdown
def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "tasks/s":
        return f"{value:,.0f}"
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:.3f}" if value < 0.1 else f"{value:.2f}"


def _cell(entry: Mapping, result: Mapping) -> str:
    if result.get("unavailable"):
        return "not available"
    if not result.get("medians"):
        return "failed" if result.get("runs") else "not run"
    if entry["runners"][result["name"]]["met"] is None:
        return "n/a (reference not run)" if entry["peer"] else "n/a"
    mine = entry["runners"][result["name"]]
    verdict = "met" if mine["met"] else "**not met**"
    if entry["peer"] is None:
        unit = {"journal_ratio": "×", "round_trip": " ms"}.get(entry["metric"], " s")
        return f"{mine['value']:.3f}{unit} {verdict}"
    return f"{mine['compared']:.2f}× {verdict}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(results: Mapping[str, Mapping], targets: list[dict], sizes: Sizes,
             meta: Mapping) -> str:
    """The medians table, the targets table and notes, as Markdown."""
    cols = metrics(sizes)
    units = {m.key: m.unit for m in cols}
    rows = []
    for result in results.values():
        med = result.get("medians") or {}
        rows.append([result["title"], result["status"]] + (
            [fmt(med.get(m.key), m.unit) for m in cols] if med else ["—"] * len(cols)))
    lines = [f"Benchmark of {meta['date']} on {meta['machine']}; "
             f"`{meta['command']}` (medians of {meta['repeat']} interleaved repetitions)."]
    busy = [run["cpu_busy_before"] for r in results.values() for run in r["runs"]
            if "cpu_busy_before" in run]
    if busy:
        lines[0] += (f" CPUs busy with other work just before a run: median "
                     f"{statistics.median(busy):.0%}, at most {max(busy):.0%}.")
    lines.append("")
    lines += _table(["runner", "runs ok"] + [m.header for m in cols], rows)
    lines += ["", "Targets (ratios of medians, hpcfutures ÷ reference):", ""]
    if meta.get("quick"):
        lines[-1:-1] = ["", "*--quick: a reduced workload to check the harness; these figures "
                        "say nothing about the targets.*"]
    hpcf = [r for r in results.values() if r["is_hpcfutures"]]
    target_rows = []
    for entry in targets:
        peer = results.get(entry["peer"]) if entry["peer"] else None
        if entry["peer"] is None:
            reference = "—"
        elif entry["reference"] is None:
            reference = (f"{peer['short']}: {peer['status']}" if peer
                         else f"{entry['peer']}: not run")
        else:
            reference = (f"{peer['short']}: {fmt(entry['reference'], units[entry['peer_metric']])}")
        target_rows.append([entry["target"], reference] + [_cell(entry, r) for r in hpcf])
    lines += _table(["target", "reference (median)"] + [r["short"] for r in hpcf], target_rows)
    notes = _notes(results)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _notes(results: Mapping[str, Mapping]) -> list[str]:
    notes = []
    for result in results.values():
        if result.get("medians"):  # why some of its columns are n/a
            notes += [f"- {result['title']}: {why}" for why in result.get("cannot", ())]
        for i, run in enumerate(result.get("runs", []), 1):
            if run["error"]:
                notes.append(f"- {result['name']} run {i}: failed: {run['error']}")
            if run.get("queued"):
                notes.append(f"- {result['name']} run {i}: srun waited in the Slurm queue, so its "
                             "ready and total include that wait (left out of the medians "
                             "unless every run waited)")
            if run.get("cpu_busy_before", 0) > BUSY_NOTE:
                notes.append(f"- {result['name']} run {i}: started while the CPUs were "
                             f"{run['cpu_busy_before']:.0%} busy with other work")
            if run.get("leftovers"):
                notes.append(f"- {result['name']} run {i}: {len(run['leftovers'])} process(es) "
                             f"still running {LINGER:g} s after the launcher returned were killed")
    return notes
