"""Send work to a serving job from outside it: the login node, a notebook, a laptop.

    sbatch examples/serve_job.sh                                    # the job serves
    python examples/offload_from_login_node.py ~/hpcfutures-<job id>.json
    python examples/offload_from_login_node.py FILE --stop          # ... then end the job

``hpcfutures.connect`` reads the job's private scheduler file (only you can) and
returns an ordinary executor: ``submit``, ``map``, ``as_completed``.  Leaving the
``with`` block only disconnects; run the script again and it reconnects.
Functions defined here travel by value, so the job needs nothing of this
script; functions imported from your own modules must be importable in the
job as well (same environment, same PYTHONPATH).
"""

import argparse
import concurrent.futures as cf
import random
import socket
import statistics

import hpcfutures


def estimate_pi(seed, samples=100_000):
    rng = random.Random(seed)
    inside = sum(rng.random() ** 2 + rng.random() ** 2 <= 1.0 for _ in range(samples))
    return 4.0 * inside / samples, socket.gethostname()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scheduler_file", help="the file the job's 'hpcfutures serve' writes")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for a job that is still queued or starting")
    parser.add_argument("--stop", action="store_true", help="stop the serving job at the end")
    args = parser.parse_args()

    with hpcfutures.connect(args.scheduler_file, wait=args.wait) as ex:
        futures = [ex.submit(estimate_pi, seed) for seed in range(16)]
        results = [future.result() for future in cf.as_completed(futures)]
        hosts = sorted({host for _, host in results})
        print(f"pi ~= {statistics.mean(value for value, _ in results):.4f} "
              f"from {len(results)} tasks on {', '.join(hosts)}")
        if args.stop:
            ex.stop_allocation()  # disconnects too; every task of the job exits 0
            print("the serving job has stopped")


if __name__ == "__main__":
    main()
