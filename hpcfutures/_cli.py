"""The ``hpcfutures`` command: ``run`` (a local launcher) and ``info`` (what was detected)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from . import __version__

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
    run.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                     help="how long other copies may outlive the client before they are "
                          "terminated (default: 10)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="COMMAND ...")

    info = commands.add_parser(
        "info", help="show the detected launcher, rank, role and settings, and why")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def _info(as_json: bool) -> int:
    from ._config import resolve_settings
    from ._roles import Role
    from ._session import bind_address, negotiate

    settings = resolve_settings()
    report: dict = {}
    try:
        plan = negotiate(settings)
    except Exception as err:  # show what is wrong rather than a traceback
        report["error"] = f"{type(err).__name__}: {err}"
        plan = None
    if plan is not None:
        identity = plan.identity
        host, interface = bind_address(settings, identity)
        report.update({
            "launcher": plan.launcher.name,
            "why": [plan.reason, *identity.reasons],
            "rank": identity.rank,
            "size": identity.size,
            "launch_id": identity.launch_id,
            "role": plan.role.value,
            "address_exchange": (plan.exchange.description if plan.exchange else
                                 "none needed (scheduler runs in this process)"),
            "bind": host or (f"interface {interface}" if interface else "Dask's default address"),
        })
        if plan.role is Role.STANDALONE:
            from .launchers.embedded import available_cores

            report["local_workers"] = (settings.max_workers or identity.local_workers
                                       or available_cores())
    report["settings"] = {
        name: {"value": getattr(settings, name), "source": source}
        for name, source in settings.sources.items()
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        from ._run import run

        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not command:
            print("hpcfutures run: no command given (e.g. hpcfutures run -n 4 python job.py)",
                  file=sys.stderr)
            return 2
        return run(args.ntasks, command, grace=args.grace)
    return _info(args.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
