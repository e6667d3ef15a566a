"""Benchmark hpcfutures side by side with its peers, interleaved, and report medians and targets.

    python benchmarks/run.py [--repeat 3] [--only NAME,...] [--quick] [--wait-idle S]
                             [--json benchmarks/results.json] [--markdown FILE]
    python benchmarks/run.py --report-from benchmarks/results.json [--markdown FILE]
    python benchmarks/run.py --list

For each repetition every available runner runs the workload once (the order rotates from one
repetition to the next, so no runner always goes first); then the medians table and the issue's
targets are printed as Markdown, and every raw figure is written as JSON.  See README.md here.

Exit status: 0, or 1 when an available hpcfutures runner failed in every repetition.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.launch import Outcome, launch, wait_until_idle
from benchmarks.report import evaluate_targets, figures, markdown, medians, ratios
from benchmarks.runners import HERE, ROOT, RUNNERS, Runner, base_env, by_name
from benchmarks.workload import QUICK, Sizes

#: Start and end of the part of a --markdown file that this script replaces.
BEGIN = "<!-- benchmark-table:begin -->"
END = "<!-- benchmark-table:end -->"
PACKAGES = ("hpcfutures", "dask", "distributed", "mpi4py", "mpich", "dask-jobqueue", "dask-mpi",
            "parsl", "executorlib")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="interleaved repetitions per runner (default: 3)")
    parser.add_argument("--only", metavar="NAME,...",
                        help="run only these runners (default: all); see --list")
    parser.add_argument("--quick", action="store_true",
                        help="a reduced workload (smoke test: the figures mean little)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds one run may take before it is killed (default: 120)")
    parser.add_argument("--json", type=Path, default=HERE / "results.json",
                        metavar="FILE", help="raw figures and medians (default: %(default)s)")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help=f"also write the tables here (between the lines {BEGIN} and "
                             f"{END} if the file has them, else the whole file)")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                        help="before each run, wait up to S seconds for the CPUs to be at most "
                             "25%% busy with other work (default: 0, just measure it)")
    parser.add_argument("--report-from", type=Path, metavar="FILE",
                        help="run nothing: print (and --markdown) the tables of a results JSON "
                             "written earlier")
    parser.add_argument("--list", action="store_true",
                        help="list the runners and whether each can run here, then exit")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        args.runners = by_name(args.only.split(",") if args.only else None)
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for runner in RUNNERS:
            print(f"{runner.name:24} {runner.unavailable() or 'available'}")
        return 0
    if args.report_from:
        return _report_from(args)
    sizes = QUICK if args.quick else Sizes()
    env = base_env(args.quick)
    results = {runner.name: _result(runner, args.timeout) for runner in args.runners}
    active = [runner for runner in args.runners if not results[runner.name]["unavailable"]]
    for runner in args.runners:
        if results[runner.name]["unavailable"]:
            _progress(f"{runner.name}: {results[runner.name]['unavailable']}")
    _prime(env)
    load_before = os.getloadavg()[0]
    _interleave(active, results, env, args)
    for result in results.values():
        _summarise(result)
    meta = {**_meta(args, sizes), "load_before": load_before, "load_after": os.getloadavg()[0]}
    targets = evaluate_targets(results, sizes)
    text = markdown(results, targets, sizes, meta)
    print(text)
    _write_json(args.json, {"meta": meta, "sizes": dataclasses.asdict(sizes),
                            "runners": results, "targets": targets, "ratios": ratios(results)})
    if args.markdown:
        _write_markdown(args.markdown, text)
    failed = [r["name"] for r in results.values()
              if r["is_hpcfutures"] and r["runs"] and not r["medians"]]
    return 1 if failed else 0


def _report_from(args: argparse.Namespace) -> int:
    data = json.loads(args.report_from.read_text())
    sizes = Sizes(**data["sizes"])
    targets = evaluate_targets(data["runners"], sizes)
    text = markdown(data["runners"], targets, sizes, data["meta"])
    print(text)
    if args.markdown:
        _write_markdown(args.markdown, text)
    return 0


def _interleave(active: list[Runner], results: dict, env: dict,
                args: argparse.Namespace) -> None:
    """Each repetition runs every runner once, starting one runner further along each time."""
    for rep in range(args.repeat):
        shift = rep % max(1, len(active))
        for runner in active[shift:] + active[:shift]:
            record = _run_once(runner, env, args.timeout, args.wait_idle)
            results[runner.name]["runs"].append(record)
            _progress(f"[{rep + 1}/{args.repeat}] {runner.name}: "
                      + (f"failed: {record['error']}" if record["error"]
                         else f"ok, total {record['figures']['total']:.2f} s"))


def _result(runner: Runner, timeout: float) -> dict:
    return {"name": runner.name, "title": runner.title, "short": runner.short,
            "is_hpcfutures": runner.is_hpcfutures, "unavailable": runner.unavailable(),
            "command": shlex.join(runner.command(timeout, "RUN-ID")), "cannot": runner.cannot,
            "runs": [], "medians": {}}


def _run_once(runner: Runner, env: dict, timeout: float, wait_idle: float) -> dict:
    run_id = f"hpcfutures-bench-{uuid.uuid4().hex[:8]}"
    busy = wait_until_idle(wait_idle)  # other sessions' work skews every figure
    load = os.getloadavg()[0]
    outcome: Outcome = launch(runner.command(timeout, run_id), env={**env, **runner.env},
                              timeout=timeout,
                              cwd=ROOT, slurm_job_name=run_id if runner.slurm else None)
    error = outcome.error
    record = {"error": error, "returncode": outcome.returncode, "t0": outcome.t0,
              "t_return": outcome.t_return, "bench": outcome.bench,
              "leftovers": outcome.leftovers,
              "queued": "queued and waiting for resources" in outcome.stderr,
              "cpu_busy_before": busy, "load_before": load, "figures": None}
    if outcome.bench is not None and error is None:
        record["figures"] = figures(outcome.bench, outcome.t0, outcome.t_return)
    if error is not None:
        record["stderr_tail"] = outcome.stderr[-4000:]
        record["stdout_tail"] = outcome.stdout[-2000:]
    return record


def _summarise(result: dict) -> None:
    """Medians over the good runs; a run that waited in the Slurm queue counts only if all did."""
    good = [run for run in result["runs"] if run["figures"]]
    unqueued = [run for run in good if not run["queued"]]
    counted = unqueued or good
    result["medians"] = medians([run["figures"] for run in counted]) if counted else {}
    if result["unavailable"]:
        result["status"] = result["unavailable"]
    elif not good:
        errors = [run["error"] for run in result["runs"]]
        result["status"] = f"failed: {errors[0]}" if errors else "not run"
    else:
        result["status"] = f"{len(good)}/{len(result['runs'])}"
        if len(counted) < len(good):
            result["status"] += f" ({len(good) - len(counted)} queued, left out)"


def _prime(env: dict) -> None:
    """Read the libraries once, so that the first run does not pay a cold file cache alone."""
    code = "import distributed, hpcfutures\n" + "".join(
        f"try:\n    import {peer}\nexcept ImportError:\n    pass\n"
        for peer in ("mpi4py.futures", "parsl.concurrent", "executorlib"))
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _progress(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- metadata and files
def _meta(args: argparse.Namespace, sizes: Sizes) -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": _machine(),
        "command": "python benchmarks/run.py " + shlex.join(_argv_for_display(args)),
        "repeat": args.repeat,
        "quick": args.quick,
        "python": platform.python_version(),
        "versions": versions,
        "slurm": _output(["srun", "--version"]),
        "git": _git(),
    }


def _argv_for_display(args: argparse.Namespace) -> list[str]:
    shown = ["--repeat", str(args.repeat)]
    if args.wait_idle:
        shown += ["--wait-idle", f"{args.wait_idle:g}"]
    if args.only:
        shown += ["--only", args.only]
    if args.quick:
        shown.append("--quick")
    return shown


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    distro = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip('"') + ", "
    except OSError:
        pass
    return (f"{platform.node()} ({distro}{os.cpu_count()} cores, {model}, "
            f"Python {platform.python_version()})")


def _output(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _git() -> dict:
    # --no-optional-locks: read only, never refresh the index
    return {"commit": _output(["git", "rev-parse", "HEAD"]),
            "dirty": bool(_output(["git", "--no-optional-locks", "status", "--porcelain"]))}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    _progress(f"raw figures written to {path}")


def _write_markdown(path: Path, text: str) -> None:
    """Replace what stands between the marker lines, or write the whole file."""
    old = path.read_text() if path.exists() else ""
    section = re.compile(rf"^{re.escape(BEGIN)}\n.*?^{re.escape(END)}$", re.M | re.S)
    if section.search(old):
        new = section.sub(lambda _: f"{BEGIN}\n{text}{END}", old, count=1)
    else:
        new = text
    path.write_text(new)
    _progress(f"tables written to {path}")


if __name__ == "__main__":
    sys.exit(main())
