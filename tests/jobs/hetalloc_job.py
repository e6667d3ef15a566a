"""allocate(workers=[...]) on Slurm: a heterogeneous job of two components, one launch.

    python tests/jobs/hetalloc_job.py JOB_DIR

Prints the hosts the map's calls ran on, one line per worker, and HETALLOC OK.
"""

import os
import socket
import sys
import time

import hpcfutures


def where(seconds):
    time.sleep(seconds)
    return socket.gethostname(), os.environ.get("SLURM_HET_GROUP", os.environ.get(
        "SLURM_PACK_GROUP", "?")), os.getpid()


def main():
    components = [{"nodes": 1, "tasks_per_node": 2}, {"nodes": 1, "tasks_per_node": 2}]
    with hpcfutures.allocate(workers=components, time="00:05:00", job_dir=sys.argv[1],
                             job_name="hpcf-hetalloc", timeout=90) as ex:
        ran = set(ex.map(where, [0.3] * 24))
        for line in sorted(ran):
            print("WORKER", *line, flush=True)
        hosts = {host for host, *_ in ran}
        ok = len(ran) == 3 and len(hosts) == 2
    print("HETALLOC OK" if ok else f"HETALLOC FAILED {ran}", flush=True)


if __name__ == "__main__":
    main()
