"""Estimate pi by Monte Carlo: the same script on a laptop or a cluster.

    python examples/monte_carlo.py                 # local worker processes
    hpcfutures run -n 4 python examples/monte_carlo.py
    srun -n 8 python examples/monte_carlo.py       # on a Slurm allocation

Each task throws its own darts with its own seed, so the answer does not
depend on which worker ran what.
"""

import math
import random

import hpcfutures

DARTS_PER_TASK = 200_000
TASKS = 40


def hits_in_quarter_circle(seed: int) -> int:
    rng = random.Random(seed)
    hits = 0
    for _ in range(DARTS_PER_TASK):
        x, y = rng.random(), rng.random()
        hits += x * x + y * y <= 1.0
    return hits


def main() -> None:
    with hpcfutures.Executor() as ex:
        hits = sum(ex.map(hits_in_quarter_circle, range(TASKS)))
    estimate = 4 * hits / (DARTS_PER_TASK * TASKS)
    print(f"pi ~= {estimate:.5f} (error {abs(estimate - math.pi):.5f}) "
          f"from {DARTS_PER_TASK * TASKS:,} darts in {TASKS} tasks")


if __name__ == "__main__":
    main()
