"""One launch over the components of a Slurm heterogeneous job (issue 28).

Arguments: WORKERS GPU_WORKERS WIDE.  The launch has WORKERS workers over all
its components; GPU_WORKERS of them own a GPU, and the WIDE ones (those of
the GPU component here) have 2 threads where the others have 1.  Prints one
CHECK line per case, the worker ranks' components, and HETJOB OK at the end.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import workers_joined

import hpcfutures

WORKERS, GPU_WORKERS, WIDE = (int(arg) for arg in sys.argv[1:4])


def where(seconds=0.3):
    time.sleep(seconds)
    return (socket.gethostname(), os.getpid(), os.environ.get("SLURM_HET_GROUP", "?"),
            hpcfutures.current_gpus())


def check(name, ok, detail=""):
    print(f"CHECK {name}: {'ok' if ok else 'FAILED ' + str(detail)}", flush=True)
    return ok


def main():
    ok = True
    with hpcfutures.Executor() as ex:
        # The executor returns once one worker has joined: wait for every component's.
        workers_joined(ex, WORKERS)
        everywhere = set(ex.map(where, [0.3] * (6 * WORKERS)))
        workers = {(host, pid) for host, pid, *_ in everywhere}
        ok &= check("plain calls use the workers of every component",
                    len(workers) == WORKERS, everywhere)
        on_gpus = [f.result() for f in [ex.submit(hpcfutures.task(where, gpus=1))
                                        for _ in range(3 * GPU_WORKERS)]]
        ok &= check("GPU calls run only where a GPU is, each sees one",
                    all(len(gpus) == 1 for *_, gpus in on_gpus), on_gpus)
        seen = {(host, pid): gpus for host, pid, _, gpus in on_gpus}
        ok &= check("no two workers share a GPU",
                    len(seen) == GPU_WORKERS
                    and len({(host, gpus) for (host, _), gpus in seen.items()}) == len(seen),
                    seen)
        wide = {(host, pid) for host, pid, *_ in [
            f.result() for f in [ex.submit(hpcfutures.task(where, cores=2))
                                 for _ in range(3 * WIDE)]]}
        narrow_hosts = {host for host, pid, _, gpus in everywhere if not gpus}
        ok &= check("cores=2 calls run only on the component with 2 threads a worker",
                    len(wide) <= WIDE and not ({host for host, _ in wide} & narrow_hosts),
                    (wide, narrow_hosts))
        try:
            ex.submit(hpcfutures.task(where, gpus=99))
            ok &= check("gpus=99 refused at submit", False)
        except ValueError as err:
            ok &= check("gpus=99 refused at submit", "gpus=99" in str(err), err)
    print("HETJOB OK" if ok else "HETJOB FAILED", flush=True)


if __name__ == "__main__":
    main()
