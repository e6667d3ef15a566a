"""The ``hpcfutures`` command.

Each subcommand is one row of :data:`SUBCOMMANDS`: its name, a one-line
summary, an example (bare ``hpcfutures`` lists them), how it declares its
arguments and the function that runs it.  A new subcommand is a new row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from collections.abc import Callable, Sequence

from . import ssh_check, submit
from .serving import play_serving_role

__all__ = ["SUBCOMMANDS", "Subcommand", "main"]

#: Copies ``hpcfutures run`` starts without ``-n`` (it says so).
DEFAULT_COPIES = 4


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One ``hpcfutures NAME`` subcommand."""

    name: str
    summary: str  #: one line, in the overview and in ``hpcfutures --help``
    example: str  #: a typical command line, shown under the summary
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None  #: ``hpcfutures NAME --help``; default: the summary


def _overview() -> str:
    """What bare ``hpcfutures`` prints: every subcommand with one example."""
    width = max(len(command.name) for command in SUBCOMMANDS)
    lines = ["usage: hpcfutures COMMAND ...   (hpcfutures COMMAND --help: its options)", "",
             "An HPC allocation as a concurrent.futures Executor. Commands:", ""]
    for command in SUBCOMMANDS:
        summary = textwrap.wrap(command.summary, 76 - width)
        lines.append(f"  {command.name:<{width}}  {summary[0]}")
        lines += [f"  {'':<{width}}  {more}" for more in summary[1:]]
        lines.append(f"  {'':<{width}}    $ {command.example}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="hpcfutures", usage="hpcfutures COMMAND ...",
        description="An HPC allocation as a concurrent.futures Executor.",
        epilog="examples:\n" + "\n".join(f"  {c.example}" for c in SUBCOMMANDS),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hpcfutures {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        sub = commands.add_parser(command.name, help=command.summary,
                                  description=command.description or command.summary)
        command.arguments(sub)
    return parser


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("-n", "--ntasks", type=int, metavar="N",
                     help=f"number of copies (default: {DEFAULT_COPIES}, and it says so)")
    run.add_argument("--grace", type=_seconds_or_zero, default=None, metavar="SECONDS",
                     help="how long other copies may outlive the client before they are "
                          "terminated (default: 10, and more for a large launch)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND ...")


def _info_arguments(info: argparse.ArgumentParser) -> None:
    info.add_argument("--json", action="store_true", help="print JSON instead of text")


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--scheduler-file", metavar="PATH",
                       help="where the scheduler writes its address and credentials (0600); "
                            "may use {job_id}, {user}, {launch_id}; default: "
                            "HPCFUTURES_SCHEDULER_FILE (one of the two is required)")
    serve.add_argument("--idle-timeout", type=_seconds, metavar="SECONDS",
                       help="stop once no client has been connected for this long "
                            "(default: serve until stopped)")
    serve.add_argument("--host", metavar="ADDRESS",
                       help="address the scheduler and workers listen on (default: "
                            "HPCFUTURES_HOST, else Dask's default, reachable from other hosts)")
    serve.add_argument("--interface", metavar="NAME",
                       help="network interface to listen on instead, e.g. ib0 "
                            "(default: HPCFUTURES_INTERFACE)")
    serve.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                       help="start-up deadline of every rank (default: HPCFUTURES_TIMEOUT "
                            "or 60)")


def _stop_arguments(stop: argparse.ArgumentParser) -> None:
    stop.add_argument("file", metavar="FILE", help="the scheduler file given to serve")
    stop.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                      help="how long to wait for the launch to confirm (default: 60)")


def _seconds(text: str, zero_ok: bool = False) -> float:
    """Seconds, or a duration such as ``90s`` or ``5min``, as the timeout options take."""
    from .._support.values import to_seconds

    try:
        return to_seconds(text, zero_ok=zero_ok)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds_or_zero(text: str) -> float:
    return _seconds(text, zero_ok=True)


def _serve(args: argparse.Namespace) -> int:
    from .._launch.serving import serve

    return play_serving_role("serve", lambda settings: serve(
        settings, idle_timeout=args.idle_timeout), {
        "scheduler_file": args.scheduler_file, "timeout": args.timeout, "host": args.host,
        "interface": args.interface})


def _stop(args: argparse.Namespace) -> int:
    from .._errors import HPCFuturesError
    from .._facade.outside.connect import stop

    try:
        stop(args.file, timeout=args.timeout)
    except HPCFuturesError as err:
        print(f"hpcfutures stop: {err}", file=sys.stderr)
        return 1
    print(f"hpcfutures stop: the launch serving through {args.file} has stopped")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .run import run

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        print("hpcfutures run: no command given (e.g. hpcfutures run -n 4 python job.py)",
              file=sys.stderr)
        return 2
    size = args.ntasks
    if size is None:
        size = DEFAULT_COPIES
        print(f"hpcfutures run: starting {size} copies of {command[0]} (the default; "
              "-n N sets how many)", file=sys.stderr, flush=True)
    elif size < 1:
        print(f"hpcfutures run: -n must be at least 1, not {size} (e.g. hpcfutures run -n 4 "
              "python job.py)", file=sys.stderr)
        return 2
    return run(size, command, grace=args.grace)


def _info(args: argparse.Namespace) -> int:
    from .._support.config import resolve_settings_despite_errors
    from .._support.options import OPTIONS
    from .._support.variables import describe_unknown, unknown_variables

    settings, errors = resolve_settings_despite_errors()
    errors = [f"ConfigurationError: {error}" for error in errors]
    report: dict = {}
    _describe_launch(settings, report)
    if errors:  # first: a wrong setting is the likelier cause of any later error
        report["error"] = "; ".join([*errors, *filter(None, [report.get("error")])])
    report["allocation_end"] = _allocation_end(settings)
    unknown = unknown_variables()
    if unknown:
        report["unknown_variables"] = [describe_unknown(name, nearest)
                                       for name, nearest in unknown.items()]
    report["settings"] = {
        option.name: {"value": getattr(settings, option.name),
                      "source": settings.sources[option.name]}
        for option in OPTIONS
    }
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 1 if "error" in report else 0
    for key, value in report.items():
        if key == "why":
            print("why:")
            for line in value:
                print(f"  - {line}")
        elif key == "unknown_variables":
            print("unknown variables:")
            for line in value:
                print(f"  - {line}")
        elif key == "settings":
            print("settings:")
            for name, entry in value.items():
                print(f"  {name} = {entry['value']!r}  ({entry['source']})")
        else:
            print(f"{key}: {value}")
    return 1 if "error" in report else 0


def _allocation_end(settings) -> str:
    """When the allocation ends and who said so (the executor drains before it)."""
    from ..launchers._endtime import find_end

    given = settings.sources.get("end_time", "default")
    end = find_end(settings.end_time, f"end_time from the {given}")
    if end is None:
        return ("unknown: no time limit found (Slurm, Grid Engine, PBS, LSF) and no "
                "HPCFUTURES_END_TIME; the executor drains only on SIGTERM")
    return str(end)


def _journal_arguments(journal: argparse.ArgumentParser) -> None:
    journal.add_argument("directory", metavar="DIR", help="the journal directory")
    journal.add_argument("--clear", action="store_true", help="remove every recorded result")


def _journal(args: argparse.Namespace) -> int:
    from .journal import journal_command

    return journal_command(args.directory, clear=args.clear)


def _describe_launch(settings, report: dict) -> None:
    """What ``negotiate`` decides, step by step, into ``report``; a step that fails
    leaves the earlier ones shown (the launcher and rank explain most errors)."""
    import os

    from .._errors import ConfigurationError
    from .._launch.plan import (
        choose_bind,
        choose_launcher,
        refuse_inside_a_task,
        refuse_loopback_across_hosts,
    )
    from .._launch.roles import Role, assign_role

    try:
        refuse_inside_a_task(os.environ)
        launcher, reason = choose_launcher(settings, os.environ)
        report.update({"launcher": launcher.name, "why": [reason]})
        identity = launcher.identity()
        report["why"] += identity.reasons
        report.update({"rank": identity.rank, "size": identity.size,
                       "launch_id": identity.launch_id})
        refuse_loopback_across_hosts(settings, identity)
        role = assign_role(identity.rank, identity.size, settings.scheduler_in_client)
        report["role"] = role.value
        report["address_exchange"] = (
            launcher.address_exchange(identity).description if role is not Role.STANDALONE
            else "none needed (scheduler runs in this process)")
    except Exception as err:  # show what is wrong rather than a traceback
        report.setdefault("launcher", "none (see error)")
        report.setdefault("role", "none (see error)")
        report["error"] = f"{type(err).__name__}: {err}"
        return
    try:
        bind = choose_bind(settings, identity)
        report.update({"bind": bind.address, "bind_why": bind.why})
    except ConfigurationError as err:
        report["error"] = f"{type(err).__name__}: {err}"
    if role is Role.STANDALONE:
        from ..launchers.local import available_cores

        report["local_workers"] = (settings.max_workers or identity.local_workers
                                   or available_cores())
    report["resources"] = _resources_line(settings, identity, role, report)


def _resources_line(settings, identity, role, report: dict) -> str:
    """What a worker of this process declares for calls that state needs."""
    import os

    from .._launch.roles import Role
    from .._support.gpus import share_of, visible_gpus

    threads = settings.threads_per_worker or identity.threads or 1
    ids, _, source = visible_gpus(os.environ)
    seen = f"GPUs {','.join(ids)} from {source}" if ids else "no GPUs (set HPCFUTURES_GPUS)"
    if role is Role.STANDALONE:
        count = int(report.get("local_workers") or 1)
        owned = sum(share_of(os.environ, i, count).count for i in range(count))
        return f"{count} local workers of {threads} thread(s); {seen}, {owned} owned by them"
    if role is not Role.WORKER:
        return f"none (the {role.value} runs no calls); {seen}"
    from .._launch.worker_side import gpus_of_worker

    share = gpus_of_worker(settings, identity, os.environ)
    named = ",".join(share.ids)
    gpus = (f"GPU {named} of its own" if share.own and share.ids else
            f"GPU {named} shared, not its own" if share.ids else "no GPU")
    return f"cores={threads}, {gpus} (of {seen})"


#: Every subcommand, in the order bare ``hpcfutures`` lists them.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "run", "start N copies of a command on this machine, like srun -n N",
        "hpcfutures run -n 4 python job.py", _run_arguments, _run,
        description="Start N copies of COMMAND on this machine, each told its rank through "
                    "HPCFUTURES_RANK, HPCFUTURES_SIZE and HPCFUTURES_LAUNCH_ID. Every line "
                    "a copy writes is tagged [rank N role]."),
    Subcommand(
        "info", "show the detected launcher, rank, role and settings, and why",
        "srun -n 4 hpcfutures info", _info_arguments, _info),
    Subcommand(
        "serve", "serve clients that connect from outside (hpcfutures.connect): rank 0 "
                 "runs the scheduler, every other rank a worker",
        "srun -n 4 hpcfutures serve --scheduler-file ~/hpcfutures-{job_id}.json",
        _serve_arguments, _serve,
        description="Run as one process of a serving launch (e.g. srun -n4 hpcfutures serve "
                    "--scheduler-file ~/hpcfutures-{job_id}.json). No rank runs your code: "
                    "clients connect from outside with hpcfutures.connect(FILE), and leaving "
                    "does not stop the launch. It stops on 'hpcfutures stop FILE', SIGTERM "
                    "(scancel, the time limit), Ctrl-C or --idle-timeout; every rank then "
                    "exits 0."),
    Subcommand(
        "stop", "stop the serving launch behind a scheduler file",
        "hpcfutures stop ~/hpcfutures-4711.json", _stop_arguments, _stop,
        description="Ask the launch that wrote FILE (hpcfutures serve) to stop, and wait "
                    "until it has: every rank exits 0 and srun returns."),
    Subcommand(
        "journal", "show what a result journal (journal=DIR) holds, or clear it",
        "hpcfutures journal ~/journals/sweep", _journal_arguments, _journal,
        description="List the calls a result journal holds, its size and the functions they "
                    "belong to; --clear removes every recorded result, so every call runs "
                    "again."),
    Subcommand(
        "submit", "submit a batch job that runs COMMAND on every task (srun, mpiexec)",
        "hpcfutures submit -N 2 -n 16 -t 1:00:00 python job.py", submit.submit_arguments,
        submit.submit, description=submit.SUBMIT_DESCRIPTION),
    Subcommand(
        "join", "serve as workers of the serving launch behind FILE (from another job)",
        "srun -n 8 hpcfutures join ~/hpcfutures-4711.json", submit.join_arguments,
        submit.join, description=submit.JOIN_DESCRIPTION),
    Subcommand(
        "ssh-check", "what allocate(ssh=HOST) would find on a cluster reached by ssh",
        "hpcfutures ssh-check cluster --python /scratch/me/env/bin/python",
        ssh_check.ssh_check_arguments, ssh_check.ssh_check,
        description=ssh_check.SSH_CHECK_DESCRIPTION),
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(_overview())
        return 2
    args = _parser().parse_args(argv)
    return next(c for c in SUBCOMMANDS if c.name == args.command).run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
