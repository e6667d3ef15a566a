"""Every case of issue 28 for one launch: calls that say what they need (cores, GPUs, memory).

Arguments: WORKERS GPU_WORKERS [mpi].  The launch has WORKERS worker
processes, GPU_WORKERS of which own a GPU (the others have none, or share
one), and HPCFUTURES_THREADS_PER_WORKER=4 threads each.  With ``mpi``, an MPI
task whose ranks need a GPU each runs too.  Prints one CHECK line per case and
RESOURCES OK at the end.
"""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import workers_joined

import hpcfutures

WORKERS, GPU_WORKERS = int(sys.argv[1]), int(sys.argv[2])
WITH_MPI = "mpi" in sys.argv[3:]
HELD = 0.4  # seconds a call holds what it asked for


def where():
    return socket.gethostname(), os.getpid()


def on_gpu(seconds):
    """What a call that asked for one GPU sees, and when it held it."""
    started = time.monotonic()
    seen = (os.environ.get("CUDA_VISIBLE_DEVICES"), hpcfutures.current_gpus())
    time.sleep(seconds)
    return where(), seen, started, time.monotonic()


def held_for(seconds):
    started = time.monotonic()
    time.sleep(seconds)
    return where(), threading.get_ident(), started, time.monotonic()


def overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def check(name, ok, detail=""):
    print(f"CHECK {name}: {'ok' if ok else 'FAILED ' + str(detail)}", flush=True)
    return ok


def main():
    ok = True
    with hpcfutures.Executor() as ex:
        # Plain calls still use every worker.  The executor returns once one has
        # joined; on a loaded machine the others can join after a short map ran.
        workers_joined(ex, WORKERS)
        places = set(ex.map(held_for, [HELD] * (8 * WORKERS)))
        workers = {place for place, *_ in places}
        ok &= check("plain calls use every worker", len(workers) == WORKERS, workers)

        # gpus=1: only on workers that own a GPU, each sees exactly one, never shared.
        gpu_task = hpcfutures.task(on_gpu, gpus=1)
        runs = [f.result() for f in [ex.submit(gpu_task, HELD) for _ in range(3 * GPU_WORKERS)]]
        seen = [(place, visible, gpus) for place, (visible, gpus), *_ in runs]
        ok &= check("each GPU call sees exactly one GPU, in CUDA_VISIBLE_DEVICES too",
                    all(len(gpus) == 1 and visible == gpus[0] for _, visible, gpus in seen),
                    seen)
        gpu_places = {place for place, *_ in seen}
        ok &= check("GPU calls run only on the workers that own a GPU",
                    len(gpu_places) <= GPU_WORKERS, gpu_places)
        shared = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                  if a[0][0] == b[0][0] and a[1][1] == b[1][1] and overlap(a[2:], b[2:])]
        ok &= check("no two running calls hold the same GPU", not shared, shared)
        in_map = list(ex.map(gpu_task, [0.05] * (2 * GPU_WORKERS)))
        ok &= check("map of a GPU task", all(len(r[1][1]) == 1 for r in in_map), in_map)

        # cores=4: runs where 4 threads are free; two never share a 4-thread worker.
        wide = [f.result() for f in [ex.submit(hpcfutures.task(held_for, cores=4), HELD)
                                     for _ in range(2 * WORKERS)]]
        crowded = [(a, b) for i, a in enumerate(wide) for b in wide[i + 1:]
                   if a[0] == b[0] and overlap(a[2:], b[2:])]
        ok &= check("cores=4 calls never share a 4-thread worker", not crowded, crowded)

        # Too much: ValueError at submit, naming what was asked and the largest worker.
        for needs, named in (({"gpus": 99}, "gpus=99"), ({"cores": 5}, "cores=5"),
                             ({"memory": "100PB"}, "memory=")):
            try:
                ex.submit(hpcfutures.task(held_for, **needs), 0)
                ok &= check(f"{named} refused at submit", False, "no error")
            except ValueError as err:
                ok &= check(f"{named} refused at submit",
                            named in str(err) and "the largest has cores=4" in str(err), err)

        if WITH_MPI:
            def members(comm, seconds):
                time.sleep(seconds)
                return comm.allgather(hpcfutures.current_gpus())

            got = ex.submit(hpcfutures.mpi_task(members, ranks=GPU_WORKERS, gpus=1), 0.1)
            gathered = got.result()
            ok &= check("an MPI task whose ranks need a GPU each",
                        all(len(g) == 1 for g in gathered), gathered)
            try:
                ex.submit(hpcfutures.mpi_task(members, ranks=GPU_WORKERS + 1, gpus=1), 0)
                ok &= check("an MPI task needing more GPU ranks than exist is refused", False)
            except ValueError as err:
                ok &= check("an MPI task needing more GPU ranks than exist is refused",
                            "only" in str(err), err)
    print("RESOURCES OK" if ok else "RESOURCES FAILED", flush=True)


if __name__ == "__main__":
    main()
