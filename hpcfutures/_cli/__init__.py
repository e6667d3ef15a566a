"""The ``hpcfutures`` command.

``run`` (a local launcher), ``info`` (what was detected), ``serve`` (every rank
of a launch serves clients from outside) and ``stop`` (end a serving launch).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import submit

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="hpcfutures",
        description="An HPC allocation as a concurrent.futures Executor.",
    )
    parser.add_argument("--version", action="version", version=f"hpcfutures {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="start N copies of a command, like srun -n N, on this machine",
        description="Start N copies of COMMAND on this machine, each told its rank through "
                    "HPCFUTURES_RANK, HPCFUTURES_SIZE and HPCFUTURES_LAUNCH_ID.")
    run.add_argument("-n", "--ntasks", type=int, default=4, metavar="N",
                     help="number of copies (default: 4)")
    run.add_argument("--grace", type=_seconds_or_zero, default=10.0, metavar="SECONDS",
                     help="how long other copies may outlive the client before they are "
                          "terminated (default: 10)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND ...")

    info = commands.add_parser(
        "info", help="show the detected launcher, rank, role and settings, and why")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")

    serve = commands.add_parser(
        "serve", help="serve: rank 0 runs the scheduler, every other rank a worker; "
                      "clients connect from outside with hpcfutures.connect(FILE)",
        description="Run as one process of a serving launch (e.g. srun -n4 hpcfutures serve "
                    "--scheduler-file ~/hpcfutures-{job_id}.json). No rank runs your code: "
                    "clients connect from outside with hpcfutures.connect(FILE), and leaving "
                    "does not stop the launch. It stops on 'hpcfutures stop FILE', SIGTERM "
                    "(scancel, the time limit), Ctrl-C or --idle-timeout; every rank then "
                    "exits 0.")
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

    stop = commands.add_parser(
        "stop", help="stop the serving launch behind a scheduler file",
        description="Ask the launch that wrote FILE (hpcfutures serve) to stop, and wait "
                    "until it has: every rank exits 0 and srun returns.")
    stop.add_argument("file", metavar="FILE", help="the scheduler file given to serve")
    stop.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                      help="how long to wait for the launch to confirm (default: 60)")

    journal = commands.add_parser(
        "journal", help="show what a result journal (journal=DIR) holds, or clear it",
        description="List the calls a result journal holds, its size and the functions "
                    "they belong to; --clear removes every recorded result, so every call "
                    "runs again.")
    journal.add_argument("directory", metavar="DIR", help="the journal directory")
    journal.add_argument("--clear", action="store_true",
                         help="remove every recorded result")

    submit.add_commands(commands)  # hpcfutures submit, hpcfutures join
    return parser


def _seconds(text: str, zero_ok: bool = False) -> float:
    """Seconds, or a duration such as ``90s`` or ``5min``, as the timeout options take."""
    from .._support.options import to_seconds

    try:
        return to_seconds(text, zero_ok=zero_ok)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds_or_zero(text: str) -> float:
    return _seconds(text, zero_ok=True)


def _serve(args: argparse.Namespace) -> int:
    import logging
    import os

    from .._errors import HPCFuturesError
    from .._launch.serving import serve
    from .._support.config import resolve_settings

    try:
        settings = resolve_settings({"scheduler_file": args.scheduler_file,
                                     "timeout": args.timeout, "host": args.host,
                                     "interface": args.interface})
        status = serve(settings, idle_timeout=args.idle_timeout)
    except HPCFuturesError as err:
        print(f"hpcfutures serve: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    # Leave at once, as every serving rank of a launch does: a task still
    # running in a worker thread must not keep the rank (and the job) alive.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _stop(args: argparse.Namespace) -> int:
    from .._errors import HPCFuturesError
    from .._facade.connect import stop

    try:
        stop(args.file, timeout=args.timeout)
    except HPCFuturesError as err:
        print(f"hpcfutures stop: {err}", file=sys.stderr)
        return 1
    print(f"hpcfutures stop: the launch serving through {args.file} has stopped")
    return 0


def _info(as_json: bool) -> int:
    from .._errors import ConfigurationError
    from .._launch.plan import choose_bind, negotiate
    from .._launch.roles import Role
    from .._support.config import resolve_settings
    from .._support.options import OPTIONS

    settings = resolve_settings()
    report: dict = {}
    try:
        plan = negotiate(settings)
    except Exception as err:  # show what is wrong rather than a traceback
        report["error"] = f"{type(err).__name__}: {err}"
        plan = None
    if plan is not None:
        identity = plan.identity
        report.update({
            "launcher": plan.launcher.name,
            "why": [plan.reason, *identity.reasons],
            "rank": identity.rank,
            "size": identity.size,
            "launch_id": identity.launch_id,
            "role": plan.role.value,
            "address_exchange": (plan.exchange.description if plan.exchange else
                                 "none needed (scheduler runs in this process)"),
        })
        try:
            bind = choose_bind(settings, identity)
            report.update({"bind": bind.address, "bind_why": bind.why})
        except ConfigurationError as err:
            report["error"] = f"{type(err).__name__}: {err}"
        if plan.role is Role.STANDALONE:
            from ..launchers.local import available_cores

            report["local_workers"] = (settings.max_workers or identity.local_workers
                                       or available_cores())
    report["allocation_end"] = _allocation_end(settings)
    report["settings"] = {
        option.name: {"value": getattr(settings, option.name),
                      "source": settings.sources[option.name]}
        for option in OPTIONS
    }
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        return 1 if "error" in report else 0
    for key, value in report.items():
        if key == "why":
            print("why:")
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "handler"):
        return args.handler(args)
    if args.command == "run":
        from .run import run

        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not command:
            print("hpcfutures run: no command given (e.g. hpcfutures run -n 4 python job.py)",
                  file=sys.stderr)
            return 2
        return run(args.ntasks, command, grace=args.grace)
    if args.command == "serve":
        return _serve(args)
    if args.command == "stop":
        return _stop(args)
    if args.command == "journal":
        from .journal import journal_command

        return journal_command(args.directory, clear=args.clear)
    return _info(args.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
