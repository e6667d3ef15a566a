"""hpcfutures at 100 to 2,000 worker ranks, beside Dask's own scheduler and workers.

    python benchmarks/scale.py                      N = 100, 250, 500, 1000, 2000
    python benchmarks/scale.py --ranks 500,2000 --json scale.json
    python benchmarks/scale.py --quick              the test suite's smoke run

For each N, a launch of N worker ranks, a scheduler rank and a client rank:
the scheduler and the client are real ranks in processes of their own
(``jobs/scale_job.py``, an ordinary user script under the ``hpcfutures run``
launcher's variables); the N workers are hosted many to a process
(``jobs/scale_hosts.py``), each running the worker role's own code.  The
worker ranks start first and wait for the scheduler file for ``--wait-first``
seconds (the ranks of a real launch wait while the scheduler's rank imports
Dask); then the scheduler and the client start, every rank joins, the client
maps ``2 N`` calls of ``--seconds`` s, then maps them again, and half a call
into the second map one hosting process is killed with SIGKILL: ``1/--hosts``
of the workers (10 %) at once.  The client leaves when that map is done.

The hosting processes run at a lower priority (``nice 10``): on a cluster
the scheduler and the client have cores of their own, here they share two
with the processes that host the workers.  Their workers' Dask system
monitors read the process's statistics every 10 s instead of twice a second
(see ``HOSTED``: a per-process cost that hosting multiplies by the workers).

The same N, process layout, map and kill run on Dask alone (its scheduler
started as ``dask scheduler`` starts it, TLS, its ``Worker``s, its
``Client``), so that what is Dask's and what is hpcfutures' shows.

Every process starts with a soft descriptor limit of ``--soft-nofile``
(1,024 by default, the usual soft limit on clusters): the scheduler holds
three descriptors per worker, so a launch above ~340 workers works only if
the scheduler raises its own limit.  The hosting processes raise theirs
(a host is hundreds of processes' worth of connections).

Figures (one row each, ``ours / Dask`` per N):

- ready: from the scheduler file's appearance to every worker joined, s;
- scheduler CPU per join: its CPU time over the same span, per worker, ms;
- scheduler descriptors: the most it held (at ready and after the map);
- file reads: reads of the scheduler file per waiting rank per second,
  after the rank's first 10 s, and the shortest time between two reads of
  one rank then (the rule is at most one a second; Dask's workers stat the
  file every 0.1 s, ``json_load_robust``; measured once, the same at every N);
- idle: once every worker joined, the launch idles ``--idle`` s: the cores its
  hosting processes and its scheduler use meanwhile (the hosted workers'
  own timers and heartbeats: the part of this machine a map cannot have);
- the first map: the same map once before, no worker lost: what such a map
  costs on this launch and this machine, the floor of the next figure, s;
  and the cores the hosting processes, the scheduler and the client used
  meanwhile (where the machine's two cores went);
- the timed maps (``--throughput``, after the first map): seconds against the
  ideal (every worker thread busy from the first call to the last), the Dask
  tasks a second each took, and how long a call took on its worker, as the
  client measured it (a sleep ends late on a host that shares two cores with
  a hundred others: the part of the gap to the ideal no batching can close);
- after the kill: from the SIGKILL to the second map's last result, s;
- certified: the killed workers whose death certificate the scheduler got
  (from the killed host's stand-in watchers, ``jobs/scale_hosts.py``);
- results right, and the ranks that ended otherwise than with the launch;
- shutdown: from the client leaving its block to the scheduler's process gone,
  and to every process gone, s (a hosting process closes its hundreds of
  workers one after another on a shared core, where a real launch closes
  each on its own: the second figure is the harness's more than the launch's);
- log lines: what the scheduler and the client printed (a wave of deaths
  should be one summary line, not one per worker).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "benchmarks" / "jobs"
FULL = [100, 250, 500, 1000, 2000]
SIDES = ("hpcfutures", "dask")


class Lines:
    """A process's stdout, line by line, with a deadline on each wait."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.queue.put(line.strip())
        self.queue.put(None)

    def next(self, timeout: float) -> str | None:
        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is not None:
            self.seen.append(line)
        return line


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def start(command: list[str], env: dict[str, str], soft_nofile: int, log: Path,
          stdout: bool = True, nice: int = 0) -> subprocess.Popen[str]:
    def limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft_nofile, hard), hard))
        if nice:
            os.nice(nice)

    return subprocess.Popen(command, cwd=ROOT, env=env, text=True, preexec_fn=limit,
                            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
                            stderr=log.open("w"), start_new_session=True)


#: What the hosting processes change, on both sides.  Each Dask worker's system monitor
#: reads its process's statistics twice a second (psutil: open descriptors, CPU, I/O
#: counters), for the dashboard.  A real rank holds a few descriptors and the read takes
#: a fraction of a millisecond; a host holds its hundreds of workers' descriptors and
#: has each of them list all of them: O(workers²) per host, 80 % of an idle host's CPU
#: at 200 workers (py-spy).  Here each hosted worker reads them every 10 s.
HOSTED = {"DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "10s"}


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (k < total % parts) for k in range(parts)]


def run_once(side: str, workers: int, args: argparse.Namespace, work: Path,
             figures: dict[str, Any]) -> None:
    """One launch of ``workers`` worker ranks on ``side``; its figures, filled into
    ``figures`` as they come (a launch that fails late keeps what it measured)."""
    tag = f"{side}-{workers}"
    scheduler_file = work / f"{tag}.json"
    credentials = work / "credentials.json"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path,
           "SCALE_CALLS": str(args.calls_per_worker * workers), "SCALE_SECONDS": str(args.seconds),
           "SCALE_WORKERS": str(workers), "SCALE_IDLE": str(args.idle),
           "SCALE_THROUGHPUT": args.throughput, "SCALE_GATHER": args.gather}
    env.pop("HPCFUTURES_LOG_DIR", None)
    ranks_env = {"HPCFUTURES_LOG_DIR": str(work / "rank-logs")} if args.rank_logs else {}
    launch = {"HPCFUTURES_SIZE": str(workers + 2),
              "HPCFUTURES_LAUNCH_ID": f"scale-{uuid.uuid4().hex[:8]}",
              "HPCFUTURES_SCHEDULER_FILE": str(scheduler_file),
              "HPCFUTURES_TIMEOUT": str(args.timeout)}
    hosts: list[subprocess.Popen[str]] = []
    reports = []
    first = 2
    for k, count in enumerate(split(workers, args.hosts)):
        report = work / f"{tag}-host{k}.json"
        reports.append(report)
        command = [sys.executable, "-m", "benchmarks.jobs.scale_hosts", side,
                   "--first", str(first), "--count", str(count), "--size", str(workers + 2),
                   "--launch-id", launch["HPCFUTURES_LAUNCH_ID"], "--scheduler-file",
                   str(scheduler_file), "--credentials", str(credentials), "--timeout",
                   str(args.timeout), "--report", str(report)]
        # Niced: on a cluster the scheduler and the client have cores of their own,
        # here they share two with the hosting processes, which must not starve them.
        hosts.append(start(command, {**env, **HOSTED}, args.soft_nofile,
                           work / f"{tag}-host{k}.log", nice=args.nice))
        first += count
    others: list[subprocess.Popen[str]] = []
    try:
        for host in hosts:
            line = Lines(host).next(args.timeout)
            if line != "WAITING":
                raise RuntimeError(f"a hosting process of {tag} did not start (said {line!r}); "
                                   f"see {work}")
        if side == "hpcfutures":
            time.sleep(args.wait_first)  # the ranks wait, as while the scheduler imports Dask
            scheduler = start([sys.executable, str(JOBS / "scale_job.py")],
                              {**env, **ranks_env, **launch, "HPCFUTURES_RANK": "0"},
                              args.soft_nofile,
                              work / f"{tag}-scheduler.log", stdout=False)
            others.append(scheduler)
            client = start([sys.executable, str(JOBS / "scale_job.py")],
                           {**env, **ranks_env, **launch, "HPCFUTURES_RANK": "1"},
                           args.soft_nofile,
                           work / f"{tag}-client.log")
        else:
            scheduler = start([sys.executable, "-m", "benchmarks.jobs.scale_hosts",
                               "dask-scheduler", "--scheduler-file", str(scheduler_file),
                               "--credentials", str(credentials)], env, args.soft_nofile,
                              work / f"{tag}-scheduler.log", stdout=False)
            others.append(scheduler)
            client = start([sys.executable, str(JOBS / "scale_dask_job.py"), str(scheduler_file),
                            str(credentials)], env, args.soft_nofile, work / f"{tag}-client.log")
        others.append(client)
        try:
            leaving = _follow(client, scheduler, scheduler_file, hosts, args, figures)
        except RuntimeError as err:
            if side != "hpcfutures":
                raise
            logs = [work / f"{tag}-host{k}.log" for k in range(len(hosts))]
            raise RuntimeError(f"{err}; the worker ranks then: {_phases(hosts, logs)}") from err
        scheduler_gone = _wait_all([scheduler], args.timeout)
        ended = _wait_all(hosts[1:] + others, args.timeout)
        figures["scheduler_gone"] = scheduler_gone - leaving if scheduler_gone else None
        figures["shutdown"] = ended - leaving if ended else None
        figures["client_status"] = client.returncode
        figures["scheduler_status"] = scheduler.returncode
    finally:
        for process in hosts + others:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        scheduler_file.unlink(missing_ok=True)
    outcomes: dict[str, int] = {}
    reads: dict[str, Any] = {"reads": 0, "rank_seconds": 0.0, "shortest_gap": None}
    for report in reports[1:]:  # the first host was killed
        if not report.exists():
            outcomes["(a host wrote no report)"] = outcomes.get("(a host wrote no report)", 0) + 1
            continue
        data = json.loads(report.read_text())
        for outcome, count in data["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
        if data["file_reads"]:
            for key in ("reads", "rank_seconds"):
                reads[key] += data["file_reads"][key]
            gaps = [g for g in (reads["shortest_gap"], data["file_reads"]["shortest_gap"])
                    if g is not None]
            reads["shortest_gap"] = min(gaps) if gaps else None
    figures["outcomes"] = outcomes
    figures["file_reads"] = reads if side == "hpcfutures" else None
    figures["log_lines"] = {who: _lines(work / f"{tag}-{who}.log") for who in ("scheduler",
                                                                             "client")}
    figures["certified"] = (_certified(work / f"{tag}-scheduler.log") if side == "hpcfutures"
                            else None)


def _follow(client: subprocess.Popen[str], scheduler: subprocess.Popen[str], scheduler_file: Path,
            hosts: list[subprocess.Popen[str]], args: argparse.Namespace,
            out: dict[str, Any]) -> float:
    """Watch the launch's phases, putting each figure in ``out`` as it comes; kill the
    first host after the first result.  Returns when the client began to leave."""
    from benchmarks.jobs.scale_hosts import CUT_AFTER, timed_maps

    # The timed maps may run up to CUT_AFTER times their ideal on Dask's side.
    deadline = time.monotonic() + args.timeout * 4 + CUT_AFTER * sum(
        calls * seconds for calls, seconds in timed_maps(args.throughput))
    while not scheduler_file.exists():
        if time.monotonic() > deadline or scheduler.poll() is not None:
            raise RuntimeError(f"no scheduler file {scheduler_file} appeared")
        time.sleep(0.01)
    published, cpu_at_publish = time.time(), cpu_seconds(scheduler.pid)
    out["fds"] = 0
    lines = Lines(client)
    killed = False
    while True:
        line = lines.next(1.0)
        if line is None:
            # A process that ended early fails the launch now, not at the deadline:
            # a host that died before its workers joined leaves the client waiting.
            ended = [f"host {k} (status {host.returncode})" for k, host in enumerate(hosts)
                     if host.poll() is not None and not (killed and k == 0)]
            if scheduler.poll() is not None:
                ended.append(f"the scheduler (status {scheduler.returncode})")
            if client.poll() is not None:
                ended.append(f"the client (status {client.returncode})")
            if ended or time.monotonic() > deadline:
                why = f"{', '.join(ended)} ended" if ended else "the client stalled"
                raise RuntimeError(f"{why} before the client left; it said {lines.seen[-5:]}")
            continue
        what, _, rest = line.partition(" ")
        when = float(rest.split()[0]) if rest else 0.0
        if what == "READY":
            out["ready"] = when - published
            out["cpu_since_publish"] = cpu_seconds(scheduler.pid) - cpu_at_publish
            out["fds"] = max(out["fds"], descriptors(scheduler.pid))
            idle_from = (time.monotonic(), _cpu_of(hosts), cpu_seconds(scheduler.pid))
        elif what == "IDLE":
            # Cores the idle launch keeps busy: the hosted workers' own timers and
            # heartbeats, which a real rank spends on a core of its own.
            span = time.monotonic() - idle_from[0]
            out["idle_hosts_cores"] = (_cpu_of(hosts) - idle_from[1]) / span
            out["idle_scheduler_cores"] = (cpu_seconds(scheduler.pid) - idle_from[2]) / span
            map_from = (time.monotonic(), _cpu_of(hosts), cpu_seconds(scheduler.pid),
                        cpu_seconds(client.pid))
        elif what == "WARM":
            out["warm_map"] = float(rest.split()[1])
            # Where the machine's cores went during the first map: on a cluster
            # each worker has its own, here the hosts share two with the others.
            span = time.monotonic() - map_from[0]
            out["map_cores"] = {"hosts": (_cpu_of(hosts) - map_from[1]) / span,
                                "scheduler": (cpu_seconds(scheduler.pid) - map_from[2]) / span,
                                "client": (cpu_seconds(client.pid) - map_from[3]) / span}
        elif what == "THROUGHPUT":
            _, label, took, ideal, rate, *more = rest.split()
            measured = [f.split("=", 1)[1] for f in more if f.startswith("measured=")]
            out.setdefault("throughput", {})[label] = {
                "seconds": float(took), "ideal": float(ideal), "tasks_per_second": float(rate),
                "given_up": any(f.startswith("cut") for f in more),
                "call_seconds": float(measured[0]) if measured and measured[0] != "None"
                else None}
        elif what == "MAPPING":
            # Half a call into the map: every worker runs its first call.
            time.sleep(max(when + args.seconds / 2 - time.time(), 0.0))
            os.killpg(hosts[0].pid, signal.SIGKILL)
            killed, killed_at = True, time.time()
        elif what == "DONE":
            out["after_kill"] = when - killed_at
            out["wrong"] = int(rest.split()[1])
            out["fds"] = max(out["fds"], descriptors(scheduler.pid))
        elif what == "LEAVING":
            return when


def _cpu_of(processes: list[subprocess.Popen[str]]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(OSError, IndexError):
            total += cpu_seconds(process.pid)
    return total


def _phases(hosts: list[subprocess.Popen[str]], logs: list[Path]) -> str:
    """Where the hosted ranks of a stalled launch are: each live host says (SIGUSR1)."""
    for host in hosts:
        if host.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(host.pid, signal.SIGUSR1)
    time.sleep(2.0)
    looking: list[int] = []
    joining = 0
    outcomes: dict[str, int] = {}
    for log in logs:
        said = [line for line in log.read_text(errors="replace").splitlines()
                if line.startswith("PHASES ")]
        if not said:
            continue
        phases = json.loads(said[-1].split(" ", 1)[1])
        looking += phases["looking"]
        joining += phases["joining or serving"]
        for outcome, count in phases["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    return (f"{len(looking)} still looking for the scheduler (ranks {looking[:10]}), "
            f"{joining} joining or serving, ended: {outcomes}")


def _wait_all(processes: list[subprocess.Popen[str]], timeout: float) -> float | None:
    """When the last of ``processes`` ended (None: some still run after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            return None
    return time.time()


def _lines(log: Path) -> int:
    try:
        return sum(1 for line in log.read_text(errors="replace").splitlines() if line.strip())
    except OSError:
        return 0


def _certified(log: Path) -> int:
    """Deaths the scheduler logged a certificate for (its first line, then the wave's
    summaries: "N more workers died within ..."), the stand-in watchers' reports."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return 0
    count = 0
    for line in text.splitlines():
        more = re.search(r"hpcfutures: (\d+) more workers died within", line)
        if more:
            count += int(more.group(1))
        elif re.search(r"hpcfutures: .* died: ", line):
            count += 1
    return count


def dask_file_reads(seconds: float = 3.0) -> float:
    """How often Dask's worker looks for a scheduler file that is not there yet, per second."""
    from distributed import utils

    looks = []
    exists = os.path.exists

    def counted(path: Any) -> bool:
        looks.append(time.monotonic())
        return exists(path)

    utils.os.path.exists = counted  # type: ignore[attr-defined]
    try:
        # Before Python 3.11 asyncio's TimeoutError, which distributed raises here, was its own
        # class, not the builtin one.
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            utils.json_load_robust("/nonexistent/hpcfutures-scale.json", timeout=seconds)
    finally:
        utils.os.path.exists = exists  # type: ignore[attr-defined]
    return len(looks) / seconds


def missing(r: dict[str, Any]) -> str:
    """A figure a side does not have: "failed" if it never got there (a side that failed
    late, as Dask's stalling after its timed maps, keeps what it measured before)."""
    return "failed" if r.get("error") else "—"


def table(results: list[dict[str, Any]], dask_reads: float | None) -> str:
    by = {(r["side"], r["workers"]): r for r in results}
    sizes = sorted({r["workers"] for r in results})

    def cell(fmt: Any) -> list[str]:
        cells = []
        for n in sizes:
            pair = [fmt(by[(side, n)]) if (side, n) in by else "—" for side in SIDES]
            cells.append(" / ".join(pair))
        return cells

    def num(key: str, spec: str = ".1f") -> Any:
        return lambda r: missing(r) if r.get(key) is None else format(r[key], spec)

    def reads(r: dict[str, Any]) -> str:
        if r["side"] == "dask":
            return "—" if dask_reads is None else f"{dask_reads:.1f}"
        fr = r.get("file_reads") or {}
        if not fr.get("rank_seconds"):
            return "—"
        gap = fr.get("shortest_gap")
        return f"{fr['reads'] / fr['rank_seconds']:.2f}" + (
            f" (≥{gap:.2f} s apart)" if gap is not None else "")

    def left(r: dict[str, Any]) -> str:
        if not r.get("outcomes"):
            return missing(r)
        other = sum(c for o, c in r.get("outcomes", {}).items() if o != "exit 0")
        return str(other)

    def right(r: dict[str, Any]) -> str:
        if r.get("wrong") is None:
            return missing(r)
        return "yes" if r["wrong"] == 0 else f"{r['wrong']} wrong"

    def logs(r: dict[str, Any]) -> str:
        lines = r.get("log_lines") or {}
        return f"{lines.get('scheduler', 0)}+{lines.get('client', 0)}"

    rows = [
        ("ready after the scheduler file appeared, s", cell(num("ready"))),
        ("scheduler CPU per join, ms", cell(num("cpu_per_join_ms", ".2f"))),
        ("scheduler descriptors, most", cell(num("fds", "d"))),
        ("scheduler-file reads per waiting rank per s, after 10 s (shortest gap)", cell(reads)),
        ("idle, every worker joined: CPU of the hosting processes / the scheduler, cores",
         cell(lambda r: missing(r) if r.get("idle_hosts_cores") is None
              else f"{r['idle_hosts_cores']:.2f}+{r['idle_scheduler_cores']:.2f}")),
        ("map of 2 N calls, nothing lost (the first map), s", cell(num("warm_map"))),
        ("the first map: CPU of the hosting processes / the scheduler / the client, cores",
         cell(lambda r: missing(r) if r.get("map_cores") is None
              else "+".join(f"{r['map_cores'][k]:.2f}"
                            for k in ("hosts", "scheduler", "client")))),
        *throughput_rows(results, sizes, cell),
        ("map done after killing 10 % of the workers (the second), s",
         cell(num("after_kill"))),
        ("killed workers whose death was certified (by their watchers)",
         cell(lambda r: missing(r) if r.get("certified") is None else str(r["certified"]))),
        ("every result right", cell(right)),
        ("surviving ranks that ended otherwise than with the launch", cell(left)),
        ("shutdown: client leaves -> scheduler gone, s", cell(num("scheduler_gone", ".2f"))),
        ("shutdown: client leaves -> every process gone, s", cell(num("shutdown", ".2f"))),
        ("log lines, scheduler+client", cell(logs)),
    ]
    head = "| hpcfutures / Dask | " + " | ".join(f"N = {n:,}" for n in sizes) + " |"
    rule = "|---|" + "---|" * len(sizes)
    return "\n".join([head, rule] + [f"| {name} | " + " | ".join(c) + " |" for name, c in rows])


def throughput_rows(results: list[dict[str, Any]], sizes: list[int], cell: Any) -> list[Any]:
    """Rows of the timed maps: how far from the ideal, and the Dask tasks a second it took."""
    labels: list[str] = []
    for r in results:
        labels += [label for label in r.get("throughput", {}) if label not in labels]
    rows = []
    for label in labels:
        calls, seconds = label.split("x")

        def ratio(r: dict[str, Any], label: str = label) -> str:
            got = r.get("throughput", {}).get(label)
            if got is None:
                return missing(r)
            if got.get("given_up"):
                return f"given up at {got['seconds']:.0f} ({got['seconds'] / got['ideal']:.0f} x)"
            return f"{got['seconds']:.1f} ({got['seconds'] / got['ideal']:.2f} x)"

        def rate(r: dict[str, Any], label: str = label) -> str:
            got = r.get("throughput", {}).get(label)
            return missing(r) if got is None else f"{got['tasks_per_second']:,.0f}"

        def call(r: dict[str, Any], label: str = label) -> str:
            got = r.get("throughput", {}).get(label) or {}
            measured = got.get("call_seconds")
            return "—" if measured is None else f"{measured * 1e3:.1f}"

        rows.append((f"map of {calls} N calls of {seconds} s, s (x the ideal)", cell(ratio)))
        rows.append(("  its Dask tasks a second", cell(rate)))
        rows.append(("  a call on its worker, as the client measured it, ms", cell(call)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default=",".join(map(str, FULL)),
                        help="worker ranks per launch, comma-separated")
    parser.add_argument("--hosts", type=int, default=10,
                        help="processes hosting the workers (one is killed: 1/HOSTS of them)")
    parser.add_argument("--seconds", type=float, default=1.0, help="each call's duration")
    parser.add_argument("--calls-per-worker", type=int, default=2,
                        help="the map's calls: this many per worker")
    parser.add_argument("--wait-first", type=float, default=13.0,
                        help="seconds the worker ranks wait before the scheduler starts")
    parser.add_argument("--idle", type=float, default=5.0,
                        help="seconds the joined launch stays idle before the first map "
                        "(its CPU then is a row)")
    parser.add_argument("--soft-nofile", type=int, default=1024)
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness of the hosting processes (0: as the scheduler)")
    parser.add_argument("--timeout", type=float, default=60.0, help="the launch's timeout")
    parser.add_argument("--only", choices=SIDES, help="run one side only")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    parser.add_argument("--rank-logs", action="store_true",
                        help="the scheduler and the client log at INFO, Dask's included, to "
                        "rank-*.log files in the logs' directory (implies --keep)")
    parser.add_argument("--gather", choices=("workers", "scheduler"), default="workers",
                        help="hpcfutures' client fetches results from the workers (its "
                             "default) or through the scheduler (to compare the two)")
    parser.add_argument("--throughput", default="20x0.5,100x0.05",
                        help="maps timed against the ideal, after the first: CALLSxSECONDS "
                             "(calls per worker, seconds each), comma-separated; '' for none. "
                             "Two maps of calls as long run one function, the second finding "
                             "it measured (100x0.05,101x0.05)")
    parser.add_argument("--quick", action="store_true",
                        help="the smoke run: 16 workers on 4 hosts, no long wait")
    args = parser.parse_args(argv)
    args.keep = args.keep or args.rank_logs
    if args.quick:
        args.ranks, args.hosts, args.wait_first, args.seconds = "16", 4, 0.0, 0.2
        args.idle, args.throughput = 0.5, "20x0.02,100x0.002"
    sizes = [int(n) for n in args.ranks.split(",")]
    work = Path(tempfile.mkdtemp(prefix="hpcfutures-scale-"))
    sys.path.insert(0, str(ROOT))
    from hpcfutures._support.security import new_credentials

    credentials = work / "credentials.json"
    fd = os.open(credentials, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(new_credentials(), handle)
    from benchmarks.jobs.scale_hosts import write_pem_files

    write_pem_files(credentials)
    results = []
    try:
        for n in sizes:
            for side in SIDES if args.only is None else (args.only,):
                began = time.monotonic()
                figures: dict[str, Any] = {"side": side, "workers": n}
                try:
                    run_once(side, n, args, work, figures)
                except Exception as err:
                    figures["error"] = str(err)
                if "cpu_since_publish" in figures:
                    figures["cpu_per_join_ms"] = figures.pop("cpu_since_publish") * 1e3 / n
                figures["wall"] = time.monotonic() - began
                results.append(figures)
                print(f"# {side} N={n}: {json.dumps(figures)}", flush=True)
        dask_reads = dask_file_reads(1.0 if args.quick else 3.0) if args.only != "hpcfutures" \
            else None
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"# logs in {work}")
    print(table(results, dask_reads))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "dask_file_reads": dask_reads},
                                        indent=1))
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
