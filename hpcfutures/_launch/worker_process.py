"""Entry point of a local worker process (the laptop default's children)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading


def main() -> None:
    # Ctrl-C reaches the whole process group; the parent decides how to stop.
    # (Started with SIGINT blocked: see children_start_deaf_to_ctrl_c.)
    from .._support.signals import ignore_ctrl_c

    ignore_ctrl_c()
    # Import Dask while the parent is still starting the scheduler.
    from .. import _dask
    from .._support.logs import quiet_dask_logging
    from .._support.loop import run_until_complete

    quiet_dask_logging()
    text = _read_line()
    if not text:  # the parent gave up before the scheduler started
        os._exit(0)
    _leave_with_parent()
    config = json.loads(text)
    sys.path[:] = config.pop("sys_path")
    from .._remote.calls import set_location

    set_location(f"local worker {config['name']} (pid {os.getpid()}) on {socket.gethostname()}")
    from .plan import mark_worker_process

    mark_worker_process(f"local worker {config['name']} (pid {os.getpid()}) of the laptop "
                        f"default on {socket.gethostname()}")
    from .._remote.gpus import install

    install(config.pop("gpu_ids", ()), config.pop("gpu_variables", ()),
            own=config.pop("gpu_own", True))
    security = _dask.make_security(config.pop("credentials", None))
    who = f"local worker {config['name']} (pid {os.getpid()}) on {socket.gethostname()}"
    status = run_until_complete(
        _dask.run_worker(config.pop("address"), who=who, security=security, **config))
    from .._remote.leftovers import end_leftover_processes

    end_leftover_processes()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status is None else status)


def _read_line() -> bytes:
    """The parent's one line on standard input (b"" if it closed the pipe instead)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        chunks.append(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return b"".join(chunks)


def _leave_with_parent() -> None:
    """Exit as soon as the parent's end of the pipe closes.

    The parent closes it only once this process has left, so an end of file
    means that the parent died without ending its launch (SIGKILL, a crash):
    nobody is left to use this worker, whatever calls it is running (Dask's
    own notice, the scheduler's connection lost, waits for them for seconds).
    The calls get /dev/null as standard input.
    """
    pipe = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)

    def watch() -> None:
        while os.read(pipe, 1 << 12):
            pass
        os._exit(PARENT_GONE)

    threading.Thread(target=watch, name="hpcfutures-parent-watch", daemon=True).start()


#: Exit status of a local worker whose parent died without ending the launch.
PARENT_GONE = 1


if __name__ == "__main__":
    main()
