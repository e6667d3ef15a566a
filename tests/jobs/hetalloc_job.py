"""allocate(workers=[...]) on Slurm: a heterogeneous job of two components, one launch.

    python tests/jobs/hetalloc_job.py JOB_DIR [GPUS]

With GPUS, the second component asks Slurm for that many GPUs on its node (the
3-node cluster has them as GRES on its last node), and calls with gpus=1 must
run there (one node, not the first component's), each seeing one GPU of its
own.  Prints the hosts the map's calls ran on, one line per worker, and
HETALLOC OK.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from waiting import workers_joined

import hpcfutures


def where(seconds):
    time.sleep(seconds)
    return socket.gethostname(), os.environ.get("SLURM_HET_GROUP", os.environ.get(
        "SLURM_PACK_GROUP", "?")), os.getpid()


def on_a_gpu(seconds):
    return (*where(seconds), hpcfutures.current_gpus())


def main():
    gpus = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    components = [{"nodes": 1, "tasks_per_node": 2},
                  {"nodes": 1, "tasks_per_node": 2, **({"gpus": gpus} if gpus else {})}]
    with hpcfutures.allocate(workers=components, time="00:05:00", job_dir=sys.argv[1],
                             job_name="hpcf-hetalloc", timeout=90) as ex:
        # allocate() returns once one worker has joined: wait for all three.
        workers_joined(ex, 3)
        ran = set(ex.map(where, [0.3] * 24))
        for line in sorted(ran):
            print("WORKER", *line, flush=True)
        hosts = {host for host, *_ in ran}
        ok = len(ran) == 3 and len(hosts) == 2
        if gpus:
            on_gpus = list(ex.map(hpcfutures.task(on_a_gpu, gpus=1), [0.3] * 8))
            print("GPU CALLS", sorted(set(on_gpus)), flush=True)
            owners = {(host, pid): tuple(seen) for host, _, pid, seen in on_gpus}
            gpu_hosts = {host for host, _ in owners}
            ok &= (all(len(seen) == 1 for *_, seen in on_gpus)
                   and len(gpu_hosts) == 1 and gpu_hosts < hosts
                   and len(owners) == 2 and len(set(owners.values())) == 2)
    print("HETALLOC OK" if ok else f"HETALLOC FAILED {ran}", flush=True)


if __name__ == "__main__":
    main()
