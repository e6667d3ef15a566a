"""Entry point of a local worker process (the laptop default's children)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main() -> None:
    # Ctrl-C reaches the whole process group; the parent decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Import Dask while the parent is still starting the scheduler.
    from .. import _dask
    from .._support.logs import quiet_dask_logging
    from .._support.loop import run_until_complete

    quiet_dask_logging()
    text = sys.stdin.read()
    if not text:  # the parent gave up before the scheduler started
        os._exit(0)
    config = json.loads(text)
    sys.path[:] = config.pop("sys_path")
    from .._remote.calls import set_location

    set_location(f"local worker {config['name']} (pid {os.getpid()}) on {socket.gethostname()}")
    from .plan import mark_worker_process

    mark_worker_process(f"local worker {config['name']} (pid {os.getpid()}) of the laptop "
                        f"default on {socket.gethostname()}")
    security = _dask.make_security(config.pop("credentials", None))
    who = f"local worker {config['name']} (pid {os.getpid()}) on {socket.gethostname()}"
    status = run_until_complete(
        _dask.run_worker(config.pop("address"), who=who, security=security, **config))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status is None else status)


if __name__ == "__main__":
    main()
