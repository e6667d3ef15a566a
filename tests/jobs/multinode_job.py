"""Where the work ran, for the multi-node tests: ``python tests/jobs/multinode_job.py MODE``.

``hosts``         every process of the launch creates the executor; the client
                  reports (the other ranks serve and exit)
``connect FILE``  a client outside a serving launch (the login node) connects
                  through FILE, reports, then stops the launch

The report: ``CLIENT <launcher> on <host>``, ``SCHEDULER <address>`` and
``WORKERS [(worker name, host), ...]``, once EXPECT_WORKERS distinct workers
(default 1) have run tasks.
"""

import os
import socket
import sys
import time

if "PMI_FD" in os.environ:  # srun --mpi=pmi2
    # MPI starts before anything else is imported, as docs/troubleshooting.rst advises
    # for MPICH under Slurm's pmi2: started after many imports, MPICH 5.0's start-up
    # message of a node can reach Slurm malformed, and the step then waits for ever.
    from mpi4py import MPI  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import hpcfutures


def where(_):
    from distributed import get_worker

    time.sleep(0.01)  # long enough that one worker cannot take every task
    return get_worker().name, socket.gethostname()


def report(ex, launcher):
    expected = int(os.environ.get("EXPECT_WORKERS", "1"))
    seen, deadline = set(), time.monotonic() + 60
    while len({name for name, _ in seen}) < expected and time.monotonic() < deadline:
        seen |= set(ex.map(where, range(24)))
    print(f"CLIENT {launcher} on {socket.gethostname()}", flush=True)
    print(f"SCHEDULER {ex._bridge._address}", flush=True)
    print(f"WORKERS {sorted(seen)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "hosts":
        with hpcfutures.Executor() as ex:
            report(ex, ex._session._plan.launcher.name)
    else:
        ex = hpcfutures.connect(sys.argv[2], wait=float(os.environ.get("CONNECT_WAIT", "0")))
        report(ex, "connect")
        ex.stop_allocation()
        print("STOPPED", flush=True)
