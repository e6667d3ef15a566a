"""Real ranks at scale (issue 30): 150 processes on 2 cores, each under a soft limit of 256 files.

``benchmarks/scale.py`` hosts thousands of worker ranks a few processes; this
harness starts every rank as its own process, as a user's job does, under the
three launchers that start real ranks on one node (under ``mpiexec`` the
scheduler's address reaches the ranks by MPI broadcast, not a file)::

    hpcfutures run -n 150 python jobs/scale_real_job.py
    srun -n 150 --overcommit python jobs/scale_real_job.py      (when Slurm runs)
    mpiexec -n 150 python jobs/scale_real_job.py                 (when MPI is there)

Each is started under ``ulimit -S -n 256`` with the hard limit unchanged, as
on clusters whose jobs start with a soft limit of 1024 under a higher hard
one: at 150 ranks the scheduler needs about 3 x 150 + 64 = 514 descriptors, so
the launch works only if every rank raises its soft limit itself.  The job
maps a few hundred calls and checks every result.  One table comes out:

| column | meaning |
|---|---|
| status | ``ok``, or why not (exit status, wrong results, timed out, its last line) |
| ready | seconds from starting the launcher to the client's executor being ready |
| first result | seconds from starting the launcher to the map's first result |
| last result | seconds from starting the launcher to the map's last result |
| launcher returned | seconds from starting the launcher until it returned |
| left behind | processes of the launch still there 5 s after the launcher returned (then killed) |
| soft limits | the client's soft open-files limit, and the workers' (each rank raised its own) |

Processes left behind are found by a marker in their environment
(``benchmarks/launch.py``): srun passes it on to its tasks, which are not our
descendants.  The figures are single runs on a shared machine: what matters is
``ok`` and ``0`` left behind; times say where the minutes go (150 imports of
Dask on 2 cores take most of them).

    python benchmarks/scale_real.py                   # 150 ranks, both launchers (~5 min)
    python benchmarks/scale_real.py --quick           # 12 ranks: checks the harness
    python benchmarks/scale_real.py -n 300 --only run --output /tmp/scale-real

The exit status is 1 if a launcher that could run did not end ``ok`` with
nothing left behind.

Every rank gets this process's environment, so a Dask setting can be tried on
all of them at once (``DASK_...`` variables).  150 ranks on 2 cores is 75
processes a core, where a cluster gives each rank its own: with Dask's
defaults an idle worker's own timers (its profiler sampling every 10 ms, its
event-loop tick every 20 ms) cost ~2.4 % of a core here, so 148 idle workers
alone wanted ~3.5 cores, the scheduler's event loop got ~1/150 of the machine,
and joins and the client's calls timed out.  hpcfutures now turns the
profiler off and ticks every 500 ms (``hpcfutures/_dask/tuning.py``, since
commit c937527): run this at a commit before it to see the difference.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.launch import Outcome, launch
from benchmarks.runners import JOBS, PY, ROOT, base_env

JOB = str(JOBS / "scale_real_job.py")
LAUNCHERS = ("run", "srun", "mpiexec")
TITLES = {"run": "`hpcfutures run`", "srun": "`srun --overcommit`", "mpiexec": "`mpiexec`"}


def _slurm_is_up() -> str | None:
    """None when srun can run here, else why not."""
    from benchmarks.runners import _slurm  # the harness's own check

    return _slurm()


def _mpi_is_there() -> str | None:
    """None when mpiexec and mpi4py can run here, else why not."""
    from benchmarks.runners import _module, _mpiexec

    return _mpiexec() or _module("mpi4py", "mpi4py mpich")()


def why_not(launcher: str) -> str | None:
    if launcher == "srun":
        return _slurm_is_up()
    if launcher == "mpiexec":
        return _mpi_is_there()
    return None


def command(launcher: str, ranks: int, timeout: float, name: str,
            soft: int = 256) -> list[str]:
    """The launcher's command line for ``ranks`` copies of the job, each rank under a
    soft open-files limit of ``soft``."""
    if launcher == "run":
        return [PY, "-m", "hpcfutures", "run", "-n", str(ranks), PY, JOB]
    if launcher == "mpiexec":
        # The scheduler's address travels by MPI broadcast, not a file.  The limit
        # is set in each rank, not on mpiexec: Hydra's proxy holds three pipes per
        # rank it starts, and at 150 ranks under 256 it cannot start them ("pipe
        # error (Too many open files)"): a site's soft limit of 1024 is Hydra's
        # limit at ~300 ranks a node, and ours is raised by each rank itself.
        return ["mpiexec", "-n", str(ranks), *under_soft_limit(soft, [PY, JOB])]
    minutes = math.ceil(timeout / 60) + 1  # Slurm ends the step even if we could not
    # --overcommit: more tasks than the node has CPUs (one CPU for the whole step).
    return ["srun", "-n", str(ranks), "--overcommit", "-J", name, "-t", str(minutes), PY, JOB]


def under_soft_limit(soft: int, argv: list[str]) -> list[str]:
    """``argv`` started with a soft open-files limit of ``soft``, the hard one unchanged."""
    return ["bash", "-c", f'ulimit -S -n {soft} && exec "$@"', "bash", *argv]


def run_one(launcher: str, args: argparse.Namespace) -> dict:
    name = f"scale-real-{uuid.uuid4().hex[:8]}"
    argv = command(launcher, args.ranks, args.timeout, name, args.soft_limit)
    if launcher != "mpiexec":
        argv = under_soft_limit(args.soft_limit, argv)
    env = {**base_env(), "SCALE_REAL_CALLS": str(args.calls),
           "SCALE_REAL_SECONDS": repr(args.seconds)}
    print(f"scale_real: {launcher}: {shlex.join(argv)}", file=sys.stderr, flush=True)
    outcome = launch(argv, env=env, timeout=args.timeout, cwd=ROOT,
                     slurm_job_name=name if launcher == "srun" else None)
    if args.output:
        folder = Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{launcher}.stdout").write_text(outcome.stdout)
        (folder / f"{launcher}.stderr").write_text(outcome.stderr)
    return summary(launcher, args, outcome)


def summary(launcher: str, args: argparse.Namespace, outcome: Outcome) -> dict:
    bench = outcome.bench or {}
    status = outcome.error or "ok"
    if status == "ok" and bench.get("client_soft_limit", 0) <= args.soft_limit:
        status = f"the client's soft limit stayed {bench.get('client_soft_limit')}"
    return {
        "launcher": launcher, "ranks": args.ranks, "status": status,
        "ready": bench.get("ready"), "first_result": bench.get("first_result"),
        "last_result": bench.get("total"), "returned": outcome.t_return - outcome.t0,
        "left_behind": len(outcome.leftovers), "leftovers": outcome.leftovers,
        "client_soft_limit": bench.get("client_soft_limit"),
        "worker_soft_limits": bench.get("worker_soft_limits"),
        "returncode": outcome.returncode, "stderr_tail": outcome.stderr.splitlines()[-40:],
        "command": outcome.argv,
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(rows: list[dict], soft: int) -> str:
    lines = [f"Real ranks under `ulimit -S -n {soft}` (hard limit unchanged), one run each:",
             "",
             "| launcher | ranks | status | ready | first result | last result "
             "| launcher returned | left behind | soft limits (client; workers) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        title = TITLES[row["launcher"]]
        if row["status"].startswith("not available"):
            lines.append(f"| {title} | {row['ranks']} | {row['status']} | | | | | | |")
            continue
        workers = ", ".join(map(str, row["worker_soft_limits"] or [])) or "-"
        lines.append(
            f"| {title} | {row['ranks']} | {row['status']} | {_seconds(row['ready'])} "
            f"| {_seconds(row['first_result'])} | {_seconds(row['last_result'])} "
            f"| {_seconds(row['returned'])} | {row['left_behind']} "
            f"| {row['client_soft_limit'] or '-'}; {workers} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--ranks", type=int, default=None,
                        help="ranks per launch (default 150; --quick: 12)")
    parser.add_argument("--quick", action="store_true",
                        help="12 ranks and 60 calls: checks the harness in seconds")
    parser.add_argument("--calls", type=int, default=None,
                        help="calls in the map (default 300; --quick: 60)")
    parser.add_argument("--seconds", type=float, default=0.05, help="each call's sleep")
    parser.add_argument("--soft-limit", type=int, default=256,
                        help="the soft open-files limit each launch starts under")
    parser.add_argument("--only", default=",".join(LAUNCHERS),
                        help="launchers to run: run, srun, mpiexec (default: all)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds one launch may take (default 600; --quick: 90)")
    parser.add_argument("--json", metavar="FILE", help="also write every figure there")
    parser.add_argument("--output", metavar="DIR",
                        help="keep each launch's stdout and stderr there")
    args = parser.parse_args(argv)
    args.ranks = args.ranks or (12 if args.quick else 150)
    args.calls = args.calls or (60 if args.quick else 300)
    args.timeout = args.timeout or (90.0 if args.quick else 600.0)
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(LAUNCHERS))
    if unknown:
        parser.error(f"unknown launcher(s) {', '.join(unknown)} (known: "
                     f"{', '.join(LAUNCHERS)})")

    rows, failed = [], False
    for launcher in wanted:
        missing = why_not(launcher)
        if missing:
            rows.append({"launcher": launcher, "ranks": args.ranks, "status": missing})
            continue
        row = run_one(launcher, args)
        rows.append(row)
        if row["status"] != "ok" or row["left_behind"]:
            failed = True
            print(f"scale_real: {launcher} did not end cleanly ({row['status']}); the last "
                  "lines of its stderr:\n  " + "\n  ".join(row["stderr_tail"]),
                  file=sys.stderr, flush=True)
        if row["leftovers"]:
            print("scale_real: left behind (killed): " + "; ".join(row["leftovers"][:10]),
                  file=sys.stderr, flush=True)
    print(table(rows, args.soft_limit), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "soft_limit": args.soft_limit,
                                               "calls": args.calls}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

