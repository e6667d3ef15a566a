"""``hpcfutures ssh-check HOST``: what ``allocate(ssh=HOST)`` would find there, ahead of time.

The resolved ssh configuration, the control master (the user's, reused, or one
opened for the check), the login node's batch system, the remote interpreter
and its versions beside this machine's, and whether the site lets a port be
forwarded.  Each line that would stop ``allocate`` says what to do.
"""

from __future__ import annotations

import argparse
import json

__all__ = ["SSH_CHECK_DESCRIPTION", "ssh_check", "ssh_check_arguments"]

SSH_CHECK_DESCRIPTION = (
    "Log in to HOST as allocate(ssh=HOST) would (reusing your control master if your ssh "
    "config has one) and report: the resolved ssh configuration, the master, the batch "
    "system on the login node, the remote Python and its hpcfutures, distributed and "
    "cloudpickle versions beside this machine's, and whether port forwarding is allowed.")

#: What ``ssh -G`` resolves that matters here.
_CONFIG_KEYS = ("hostname", "user", "port", "proxyjump", "proxycommand", "controlmaster",
                "controlpath", "stricthostkeychecking", "userknownhostsfile")

#: Run by the remote interpreter: its versions, as JSON.
_VERSIONS = ("import json, sys\nfrom importlib import metadata\nv = {'python': "
             "'%d.%d' % sys.version_info[:2]}\nfor n in ('hpcfutures', 'distributed', "
             "'cloudpickle'):\n    try:\n        v[n] = metadata.version(n)\n    except "
             "Exception:\n        v[n] = None\nprint(json.dumps(v))\n")


def ssh_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="what 'ssh HOST' accepts (an alias)")
    parser.add_argument("--python", default=None,
                        help="the interpreter on the cluster (default: python3 on its PATH)")
    parser.add_argument("--setup", default=None,
                        help="shell lines run first there, e.g. 'module load slurm'")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def ssh_check(args: argparse.Namespace) -> int:
    from .._errors import HPCFuturesError
    from .._ssh.cluster import Cluster
    from .._ssh.openssh import SSH

    report: dict = {"host": args.host}
    problems: list[str] = []
    try:
        cluster = Cluster(SSH(args.host, python=args.python, setup=args.setup))
        cluster.connection.config = config = cluster.connection.resolve()
        report["ssh_config"] = {k: config[k] for k in _CONFIG_KEYS if k in config}
        cluster.open()
    except (HPCFuturesError, ValueError) as err:
        report["error"] = f"{type(err).__name__}: {err}"
        return _print(report, args.json, 1)
    try:
        _look(cluster, report, problems)
    finally:
        cluster.close()
    if problems:
        report["error"] = "; ".join(problems)
    return _print(report, args.json, 1 if problems else 0)


def _look(cluster, report: dict, problems: list[str]) -> None:
    from .._errors import AllocationError
    from .._ssh.openssh import Reach

    connection = cluster.connection
    report["master"] = (f"opened for this check ({connection.control})" if connection.owned
                        else f"yours, reused ({connection.control})")
    report["login_node"] = f"{cluster.hostname} (home {cluster.home})"
    try:
        system = cluster.batch_system()
        report["batch_system"] = f"{system.title} ({cluster.tools[system.probe]})"
    except AllocationError as err:
        report["batch_system"] = "none"
        problems.append(str(err))
    python = cluster.ssh.python or "python3"
    done = connection.run([f"{_quote(python)} - <<'EOF'", _VERSIONS.rstrip("\n"), "EOF"],
                          f"run {python}")
    from .._support.environment import mismatch, versions

    local = versions()
    if done.returncode != 0:
        report["remote_python"] = f"{python}: failed ({done.stderr.strip()[-300:]})"
        problems.append(f"{python} does not run on {cluster.target}: pass --python PATH (and "
                        "SSH(python=PATH) to allocate) with the interpreter that has hpcfutures")
    else:
        remote = json.loads(done.stdout.strip().splitlines()[-1])
        report["remote_python"] = python
        report["versions"] = {name: {"here": local[name], "there": remote.get(name)}
                              for name in local}
        if remote.get("hpcfutures") is None:
            problems.append(f"hpcfutures is not installed for {python} on {cluster.target}")
        else:
            problem = mismatch("this machine", remote, f"{python} on {cluster.target}")
            if problem:
                problems.append(problem)
    host, port = connection.config.get("hostname", ""), int(connection.config.get("port", 22))
    reach, said = connection.reach(host, port)
    report["port_forwarding"] = {Reach.OPEN: "allowed", Reach.PROHIBITED: "prohibited",
                                 }.get(reach, f"could not tell ({said})")
    if reach == Reach.PROHIBITED:
        problems.append(f"the login node refuses port forwarding ({said}); allocate(ssh=...) "
                        "needs one forwarded port to reach the job's scheduler")


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def _print(report: dict, as_json: bool, status: int) -> int:
    if as_json:
        print(json.dumps(report, indent=2))
        return status
    for key, value in report.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for name, entry in value.items():
                print(f"  {name}: {entry}")
        else:
            print(f"{key}: {value}")
    return status
