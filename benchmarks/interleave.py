"""Launches whose ranks start in every order: each ends with its client's status, promptly.

    python benchmarks/interleave.py                      30 launches under each launcher
    python benchmarks/interleave.py --launches 5 --only run,srun --seed 7

Each launch has 4 ranks (scheduler, client, two workers) and draws, from its
seed: a start delay per rank (0 to ``--most`` s, the scheduler's and the
client's included), how its client ends (at once, after one call, after a map,
by an exception caught or not: ``jobs/interleave_job.py``), and a seed for
``HPCFUTURES_INTERLEAVE``, which pauses each rank at each step of its look-up
(before it reads the scheduler file, between reading and connecting, while the
scheduler closes; up to ``--step-most`` s each; ``hpcfutures/_support/interleave.py``).
One seed replays one launch.

A launch passes when:

* its status is the client's (``raise-uncaught``: 1, else 0); for a job array,
  the client's element ends with the client's status and every other with 0;
* it ends within ``--grace`` s of the client's end, plus the longest start delay
  and one pause per step (a rank that starts after the end still has to start);
* no rank says it failed to start (a start-up timeout, a lost scheduler) and
  no traceback is printed but the uncaught exception's;
* no process of the launch is left.

Launchers: ``run`` (``hpcfutures run -n 4``), ``srun`` (``srun -n 4``),
``mpiexec`` (``mpiexec -n 4``), ``array`` (``sbatch --array=0-3``).  The test
suite runs a short form (``tests/test_interleave.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.launch import MARKER_VAR, sweep
from benchmarks.launch import launch as run_launcher

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "benchmarks" / "jobs" / "interleave_job.py"
LAUNCHERS = ("run", "srun", "mpiexec", "array")
ENDINGS = ("at-once", "call", "map", "raise-caught", "raise-uncaught")
RANKS = 4
#: Keep MPI (UCX) and Hydra on loopback.
MPI_LOOPBACK = {"UCX_NET_DEVICES": "lo", "HYDRA_IFACE": "lo"}
#: What a rank prints when it fails to start or loses its launch.
FAILURE_WORDS = ("StartupTimeoutError", "LauncherError", "BrokenHPCExecutor",
                 "lost the scheduler", "waited", "srun: error", "Killed")
SLURM_FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
               "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


@dataclasses.dataclass
class Draw:
    """What one seed decides about a launch."""

    seed: int
    delays: list[float]
    ending: str
    step_seed: int

    @classmethod
    def of(cls, seed: int, most: float) -> Draw:
        rng = random.Random(seed)
        delays = [round(rng.uniform(0.0, most), 2) for _ in range(RANKS)]
        return cls(seed, delays, ENDINGS[seed % len(ENDINGS)], rng.randrange(1 << 30))

    @property
    def status(self) -> int:
        """The client's exit status, and so the launch's."""
        return 1 if self.ending == "raise-uncaught" else 0


@dataclasses.dataclass
class Outcome:
    launcher: str
    draw: Draw
    status: int | None = None
    #: Seconds from the client's end to the launch's end; None: unknown.
    lag: float | None = None
    bound: float = 0.0
    problems: list[str] = dataclasses.field(default_factory=list)
    output: str = ""

    @property
    def passed(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        d = self.draw
        head = (f"{self.launcher} seed {d.seed} ({d.ending}, delays {d.delays}): "
                f"status {self.status}, lag {self.lag if self.lag is None else round(self.lag, 2)}"
                f" s (bound {self.bound:.1f} s)")
        if self.passed:
            return head
        return head + "\n  " + "\n  ".join(self.problems) + "\n--- output\n" + self.output


def launch(launcher: str, seed: int, *, most: float = 5.0, step_most: float = 0.5,
           grace: float = 5.0, timeout: float = 120.0) -> Outcome:
    """One launch under ``launcher`` as ``seed`` draws it; see the module's docstring."""
    draw = Draw.of(seed, most)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "INTERLEAVE_DELAYS": ",".join(map(str, draw.delays)),
           "HPCFUTURES_INTERLEAVE": f"{draw.step_seed}:{step_most}" if step_most else ""}
    outcome = Outcome(launcher, draw, bound=grace + max(draw.delays) + 3 * step_most)
    left = _array(outcome, env, timeout) if launcher == "array" else _step(outcome, env, timeout)
    _check_output(outcome)
    if left:
        outcome.problems.append(f"processes left (killed): {left}")
    return outcome


def _step(outcome: Outcome, env: dict[str, str], timeout: float) -> list[str]:
    """A launch that one command starts and waits for (run, srun, mpiexec), by
    ``benchmarks/launch.py``; the processes it left behind (killed)."""
    script = [sys.executable, str(JOB), outcome.draw.ending]
    name = f"hpcf-interleave-{uuid.uuid4().hex[:8]}"
    if outcome.launcher == "run":
        command = [sys.executable, "-m", "hpcfutures", "run", "-n", str(RANKS), *script]
    elif outcome.launcher == "srun":
        command = ["srun", f"-n{RANKS}", "-J", name, "-t", "5", *script]
    elif outcome.launcher == "mpiexec":
        command = ["mpiexec", "-n", str(RANKS), *script]
        env.update(MPI_LOOPBACK)
    else:
        raise ValueError(f"unknown launcher {outcome.launcher!r}; known: {', '.join(LAUNCHERS)}")
    # linger=0: a process still there when the launcher returned is one left behind.
    ran = run_launcher(command, env=env, timeout=timeout, cwd=ROOT,
                       slurm_job_name=name if outcome.launcher == "srun" else None, linger=0)
    if ran.timed_out:
        outcome.problems.append(f"the launch had not ended {timeout:g} s after its start")
    outcome.output, outcome.status = ran.stdout + ran.stderr, ran.returncode
    if outcome.status != outcome.draw.status:
        outcome.problems.append(f"the launch ended {outcome.status}, its client "
                                f"{outcome.draw.status}")
    _check_lag(outcome, outcome.output, ran.t_return)
    return ran.leftovers


def _array(outcome: Outcome, env: dict[str, str], timeout: float) -> list[str]:
    """A Slurm job array of ``RANKS`` elements, one rank each; the processes it left
    behind (killed)."""
    marker = uuid.uuid4().hex
    env = {**env, MARKER_VAR: marker}  # sbatch passes the environment to every element
    with tempfile.TemporaryDirectory(prefix="hpcf-interleave-") as folder:
        submitted = subprocess.run(
            ["sbatch", "--parsable", f"--array=0-{RANKS - 1}", "-t", "5",
             "-o", f"{folder}/out_%a", "--wrap",
             f"exec {sys.executable} {JOB} {outcome.draw.ending}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
        if submitted.returncode != 0:
            outcome.problems.append(f"sbatch failed: {submitted.stderr.strip()}")
            return []
        job = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        facts: dict[int, dict[str, str]] = {}
        while time.monotonic() < deadline:
            facts = {i: _job_facts(f"{job}_{i}") for i in range(RANKS)}
            if all(f.get("JobState") in SLURM_FINAL for f in facts.values()):
                break
            time.sleep(0.5)
        else:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)
            outcome.problems.append(f"the array had not ended {timeout:g} s after its start")
        outputs = {i: _read(Path(folder) / f"out_{i}") for i in range(RANKS)}
    outcome.output = "\n".join(f"--- element {i} ({facts.get(i)})\n{text}"
                               for i, text in outputs.items())
    codes = {i: f.get("ExitCode", "?") for i, f in facts.items()}
    outcome.status = _exit_status(codes.get(1, "?"))
    wanted = {i: (f"{outcome.draw.status}:0" if i == 1 else "0:0") for i in range(RANKS)}
    if codes != wanted:
        outcome.problems.append(f"the elements ended {codes}; wanted {wanted}")
    ends = [float(f["EndTime"]) for f in facts.values() if f.get("EndTime", "").isdigit()]
    # EndTime counts whole seconds: the lag is known to within one.
    _check_lag(outcome, outputs[1], max(ends) + 1 if len(ends) == RANKS else None)
    return sweep(marker, linger=0)  # every element has ended


def _check_lag(outcome: Outcome, client_output: str, ended: float | None) -> None:
    found = re.search(r"CLIENT-END (\S+) (\d+)$", client_output, re.MULTILINE)
    if found is None:
        outcome.problems.append("the client never reached the end of its block")
        return
    if ended is None:
        outcome.problems.append("the launch's end is not known")
        return
    outcome.lag = ended - float(found[1])
    if outcome.lag > outcome.bound:
        outcome.problems.append(f"the launch ended {outcome.lag:.1f} s after its client, "
                                f"more than {outcome.bound:.1f} s")


def _check_output(outcome: Outcome) -> None:
    text = outcome.output
    # srun names each task that ended with a failure status: the client's own, passed on.
    passed_on = f"Exited with exit code {outcome.draw.status}" if outcome.draw.status else None
    said = [line for line in text.splitlines() if any(w in line for w in FAILURE_WORDS)
            and not (passed_on and line.startswith("srun: error: ") and line.endswith(passed_on))]
    if said:
        outcome.problems.append("a rank reported a failure: " + " | ".join(said[:5]))
    tracebacks = text.count("Traceback (most recent call last)")
    allowed = 1 if outcome.draw.ending == "raise-uncaught" else 0
    if tracebacks > allowed:
        outcome.problems.append(f"{tracebacks} tracebacks printed, {allowed} expected")


def _job_facts(job_id: str) -> dict[str, str]:
    result = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                            text=True, timeout=30, env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
    return dict(re.findall(r"\b(JobState|ExitCode|EndTime)=(\S+)", result.stdout))


def _exit_status(code: str) -> int | None:
    status, _, _ = code.partition(":")
    return int(status) if status.isdigit() else None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def run(launchers: list[str], launches: int, first_seed: int = 0,
        **options: float) -> list[Outcome]:
    """``launches`` seeded launches under each launcher, seeds ``first_seed`` onwards."""
    return [launch(name, seed, **options)
            for name in launchers for seed in range(first_seed, first_seed + launches)]


def table(outcomes: list[Outcome]) -> str:
    rows = ["| launcher | launches | passed | longest lag, s | its bound, s | failed seeds |",
            "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(o.launcher for o in outcomes):
        mine = [o for o in outcomes if o.launcher == name]
        timed = [o for o in mine if o.lag is not None]
        worst = max(timed, key=lambda o: o.lag or 0.0) if timed else None
        failed = [str(o.draw.seed) for o in mine if not o.passed]
        rows.append(f"| {name} | {len(mine)} | {len(mine) - len(failed)} | "
                    f"{'-' if worst is None else f'{worst.lag:.2f}'} | "
                    f"{'-' if worst is None else f'{worst.bound:.1f}'} | "
                    f"{', '.join(failed) or '-'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=30, help="per launcher (default 30)")
    parser.add_argument("--only", default=",".join(LAUNCHERS),
                        help=f"comma-separated launchers (default {','.join(LAUNCHERS)})")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--most", type=float, default=5.0, help="longest start delay, s")
    parser.add_argument("--step-most", type=float, default=0.5,
                        help="longest pause at each step of a look-up, s (0: none)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds a launch may take to end after its client and delays")
    args = parser.parse_args(argv)
    outcomes = []
    for name in args.only.split(","):
        for seed in range(args.seed, args.seed + args.launches):
            outcome = launch(name, seed, most=args.most, step_most=args.step_most,
                             grace=args.grace)
            print(("ok   " if outcome.passed else "FAIL ") + str(outcome), flush=True)
            outcomes.append(outcome)
    print()
    print(table(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
