"""``hpcfutures submit`` (a batch job running a command on every task) and ``hpcfutures join``.

``submit`` writes the batch script for the batch system here (Slurm, Grid
Engine, PBS, LSF), with the command under the system's task launcher
(``srun``, else ``mpiexec``), submits it, and prints the job id and where its
output goes; ``--wait`` follows the job to its end and returns the command's
exit status.  ``join`` is what the worker jobs of
``AllocatedExecutor.scale()`` run: workers for a serving launch started by
another job.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

__all__ = ["join", "join_arguments", "submit", "submit_arguments"]

#: Longest pause between two looks at the queue while following a job.
FOLLOW_CAP = 5.0


#: ``hpcfutures submit --help``.
SUBMIT_DESCRIPTION = (
    "Write a batch script for this machine's batch system that runs COMMAND under its task "
    "launcher (srun for Slurm, mpiexec elsewhere), submit it, and print the job id and its "
    "output file. Example: hpcfutures submit -N 2 -n 16 -t 1:00:00 python job.py")
#: ``hpcfutures join --help``.
JOIN_DESCRIPTION = (
    "Every process of this launch becomes a worker of the serving launch that wrote FILE "
    "(hpcfutures serve); they leave when it stops or retires them as idle. "
    "AllocatedExecutor.scale() submits jobs that run this.")


def submit_arguments(submit: argparse.ArgumentParser) -> None:
    """The options of ``hpcfutures submit``."""
    submit.add_argument("-N", "--nodes", type=int, default=1, metavar="NODES")
    submit.add_argument("-n", "--ntasks", type=int, metavar="TASKS",
                        help="tasks in all, a multiple of NODES (default: one per node)")
    submit.add_argument("-t", "--time", metavar="TIME", help="time limit, e.g. 1:00:00")
    submit.add_argument("-p", "--partition", metavar="NAME", help="partition (queue)")
    submit.add_argument("-A", "--account", metavar="NAME")
    submit.add_argument("--mem", metavar="SIZE", help="memory per node, e.g. 16GB")
    submit.add_argument("--gpus", type=int, metavar="N", help="GPUs per node")
    submit.add_argument("--component", action="append", default=[], metavar="SHAPE",
                        help="a further component of a heterogeneous job (Slurm), e.g. "
                             "nodes=2,tasks_per_node=4,gpus=4,memory=64GB (repeatable); "
                             "-N/-n/--mem/--gpus shape the first")
    submit.add_argument("-J", "--job-name", metavar="NAME", help="default: the script's name")
    submit.add_argument("-o", "--output", metavar="PATH",
                        help="the job's output file (default: NAME-ID.out here)")
    submit.add_argument("--directive", action="append", default=[], metavar="LINE",
                        help="a line for the batch script, unchanged (repeatable)")
    submit.add_argument("--job-dir", default="~/.hpcfutures/jobs", metavar="DIR",
                        help="where the batch script is kept (default: ~/.hpcfutures/jobs)")
    submit.add_argument("--batch-system", choices=["slurm", "sge", "pbs", "lsf"],
                        help="default: the one whose commands are on PATH")
    submit.add_argument("--wait", action="store_true",
                        help="follow the job to its end; exit with its exit status")
    submit.add_argument("--dry-run", action="store_true",
                        help="print the batch script instead of submitting it")
    submit.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND ...")


def join_arguments(join: argparse.ArgumentParser) -> None:
    """The options of ``hpcfutures join``."""
    join.add_argument("file", metavar="FILE", help="the serving launch's scheduler file")
    join.add_argument("--timeout", metavar="SECONDS", help="start-up deadline (default: 60)")
    join.add_argument("--host", metavar="ADDRESS")
    join.add_argument("--interface", metavar="NAME")


def submit(args: argparse.Namespace) -> int:
    from .._errors import HPCFuturesError

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        print("hpcfutures submit: no command given (e.g. hpcfutures submit -N 2 -n 16 python "
              "job.py)", file=sys.stderr)
        return 2
    try:
        return _submit_command(args, command)
    except (HPCFuturesError, ValueError) as err:
        print(f"hpcfutures submit: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1


def _submit_command(args: argparse.Namespace, command: list[str]) -> int:
    from .._facade.outside.batchjob import Allocation
    from .._launch.outside import expand_path
    from ..launchers._batchfind import detect_batch_system, get_batch_system
    from ..launchers._batchscript import Request, memory_megabytes, parse_walltime

    tasks = args.ntasks or args.nodes
    if args.nodes < 1 or tasks % args.nodes:
        raise ValueError(f"-n {tasks} is not a multiple of -N {args.nodes}: every node gets "
                         "the same number of tasks")
    name = args.job_name or _name_of(command)
    token = uuid.uuid4().hex[:8]
    output = Path(args.output or f"{name}-{token}.out").absolute()
    request = Request(nodes=args.nodes, tasks_per_node=tasks // args.nodes,
                      time=parse_walltime(args.time), partition=args.partition,
                      account=args.account, memory=memory_megabytes(args.mem), gpus=args.gpus,
                      name=name, output=str(output), directives=tuple(args.directive))
    if args.component:
        from ..launchers._request import with_components

        first = {"nodes": request.nodes, "tasks_per_node": request.tasks_per_node,
                 "memory": args.mem, "gpus": args.gpus}
        request = with_components(request, [first, *map(_shape, args.component)])
    system = get_batch_system(args.batch_system) if args.batch_system else detect_batch_system()
    status_file = Path(f"{output}.status")
    allocation = Allocation(system, request, expand_path(args.job_dir), command,
                            token=token, status_file=str(status_file))
    if args.dry_run:
        print(allocation.script, end="")
        return 0
    allocation.submit()
    print(f"hpcfutures submit: {allocation} submitted; output: {output}", flush=True)
    if not args.wait:
        return 0
    return _follow(allocation, status_file)


def _shape(text: str) -> dict:
    """``nodes=2,tasks_per_node=4,gpus=4,memory=64GB`` as a component's dict."""
    shape: dict = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        name = name.strip().replace("-", "_")
        if not value:
            raise ValueError(f"--component {text!r}: expected NAME=VALUE pairs such as "
                             "nodes=2,tasks_per_node=4,gpus=4")
        shape[name] = value.strip() if name == "memory" else _whole(text, value)
    return shape


def _whole(text: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"--component {text!r}: {value!r} is not a whole number") from None


def _follow(allocation, status_file: Path) -> int:
    """Wait for the job to leave the queue; its command's exit status (Ctrl-C cancels it)."""
    from .._support.backoff import Backoff
    from ..launchers._batchscript import JobState

    backoff = Backoff(first=0.2, cap=FOLLOW_CAP)
    try:
        while allocation.state() is not JobState.GONE:
            backoff.sleep(time.monotonic() + FOLLOW_CAP)
    except KeyboardInterrupt:
        allocation.cancel()
        print(f"hpcfutures submit: interrupted; {allocation} was cancelled", file=sys.stderr)
        return 130
    try:
        status = int(status_file.read_text().strip())
    except (OSError, ValueError):
        print(f"hpcfutures submit: {allocation} ended without reporting an exit status "
              f"(cancelled, killed, or out of time); see {allocation.output}", file=sys.stderr)
        return 1
    print(f"hpcfutures submit: {allocation} ended with exit status {status}", flush=True)
    return status


def _name_of(command: list[str]) -> str:
    """A job name from the command: the script's name (``python job.py`` -> ``job``)."""
    words = [word for word in command if not word.startswith("-")]
    script = next((w for w in words[1:] if w.endswith(".py") or "/" in w), words[0])
    return Path(script).stem or "hpcfutures"


def join(args: argparse.Namespace) -> int:
    from .._launch.outside import expand_path
    from .._launch.serving import join
    from .serving import play_serving_role

    return play_serving_role("join", lambda settings: join(settings, expand_path(args.file)), {
        "timeout": args.timeout, "host": args.host, "interface": args.interface})
