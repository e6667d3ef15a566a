"""Estimate pi by Monte Carlo on the ranks of an MPI job.

    mpiexec -n 4 python examples/mpi_montecarlo.py
    srun --mpi=pmi2 -n 4 python examples/mpi_montecarlo.py

Rank 0 runs the Dask scheduler and broadcasts its address over MPI (no file
on a shared filesystem), rank 1 runs the body of the ``with`` block, and the
other ranks are the workers.  Only rank 1 prints; every rank exits 0.

Needs ``pip install 'hpcfutures[mpi]' mpich`` (or mpi4py built for your MPI).
"""

import math
import random

import hpcfutures

DARTS_PER_TASK = 100_000
TASKS = 32


def throw_darts(seed: int) -> tuple[int, int]:
    """(hits inside the quarter circle, MPI rank that threw them)."""
    from mpi4py import MPI  # already initialised on this rank by hpcfutures

    rng = random.Random(seed)
    hits = 0
    for _ in range(DARTS_PER_TASK):
        x, y = rng.random(), rng.random()
        hits += x * x + y * y <= 1.0
    return hits, MPI.COMM_WORLD.Get_rank()


def main() -> None:
    with hpcfutures.MPIExecutor() as ex:
        results = list(ex.map(throw_darts, range(TASKS)))
    hits = sum(h for h, _ in results)
    ranks = sorted({rank for _, rank in results})
    estimate = 4 * hits / (DARTS_PER_TASK * TASKS)
    print(f"pi ~= {estimate:.5f} (error {abs(estimate - math.pi):.5f}) "
          f"from {DARTS_PER_TASK * TASKS:,} darts in {TASKS} tasks on MPI ranks {ranks}")


if __name__ == "__main__":
    main()
