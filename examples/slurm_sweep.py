"""A parameter sweep on a Slurm allocation: one script, every task of the job.

    srun -n4 python examples/slurm_sweep.py        # rank 0 scheduler, 1 this script, 2-3 workers
    sbatch examples/slurm_job.sh                   # the same, from a batch script
    sbatch examples/slurm_array.sh                 # the same, as a job array

Each task integrates sin(k x) over [0, pi] with Simpson's rule, a stand-in for
an expensive simulation whose exact answer, (1 - cos(k pi)) / k, lets the
script check itself.  Only the client (rank 1) runs the code inside the
``with`` block; the other ranks serve as scheduler and workers and leave when
it is done, so the summary is printed once.
"""

import math
import socket

import hpcfutures


def simpson_sin(k: int, intervals: int = 200_000) -> tuple[int, float, str]:
    """Integrate sin(k x) over [0, pi]; also say which host did the work."""
    h = math.pi / intervals
    total = math.sin(0.0) + math.sin(k * math.pi)
    for i in range(1, intervals):
        total += (4 if i % 2 else 2) * math.sin(k * i * h)
    return k, total * h / 3, socket.gethostname()


def exact(k: int) -> float:
    return (1 - math.cos(k * math.pi)) / k


def main() -> None:
    ks = range(1, 17)
    # SlurmExecutor reads the roles from srun (or the array); hpcfutures.Executor()
    # would detect Slurm by itself, and run locally on a laptop.
    with hpcfutures.SlurmExecutor() as ex:
        results = list(ex.map(simpson_sin, ks))
    worst = max(abs(value - exact(k)) for k, value, _ in results)
    hosts = sorted({host for _, _, host in results})
    for k, value, _ in results[:4]:
        print(f"  k={k:2d}  integral={round(value, 9) + 0.0:.9f}  exact={exact(k):.9f}")
    print(f"integrated sin(k x) for {len(results)} values of k on {', '.join(hosts)}; "
          f"largest error {worst:.1e}")
    if worst > 1e-9:
        raise SystemExit(f"the sweep is wrong: an error of {worst:.1e} is too large")


if __name__ == "__main__":
    main()
