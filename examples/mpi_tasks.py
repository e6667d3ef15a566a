"""Tasks that are MPI programs: one call spread over several worker ranks.

    mpiexec -n 8 python examples/mpi_tasks.py
    srun --mpi=pmi2 -n 8 python examples/mpi_tasks.py

Each call of ``integrate`` runs on 4 (or 2) worker ranks at once, with an
mpi4py communicator of just those ranks: every rank integrates its share of
the interval and ``allreduce`` adds the shares up.  The future's result is
what communicator rank 0 returned.  Ranks 0 and 1 are the scheduler and the
client, so 8 processes give 6 workers: one 4-rank call and one 2-rank call
fit at the same time, and the executor still runs ordinary tasks beside them.

Needs ``pip install 'hpcfutures[mpi]' mpich`` (or mpi4py built for your MPI).
"""

import math

import hpcfutures

POINTS = 400_000


def integrate(comm, a: float, b: float) -> float:
    """The integral of sin over [a, b] by the midpoint rule, split over ``comm``'s ranks."""
    step = (b - a) / POINTS
    mine = range(comm.rank, POINTS, comm.size)  # every comm.size-th point is this rank's
    part = sum(math.sin(a + (i + 0.5) * step) for i in mine) * step
    return comm.allreduce(part)


def main() -> None:
    with hpcfutures.Executor() as ex:
        wide = ex.submit(hpcfutures.mpi_task(integrate, ranks=4), 0.0, math.pi)
        halves = ex.map(hpcfutures.mpi_task(integrate, ranks=2), [0.0, math.pi / 2],
                        [math.pi / 2, math.pi])
        plain = ex.submit(math.cos, math.pi)  # an ordinary task, beside the MPI ones
        total, parts = wide.result(), list(halves)
    print(f"integral of sin over [0, pi] ~= {total:.6f} on 4 ranks; "
          f"halves {parts[0]:.6f} + {parts[1]:.6f} on 2 ranks each; cos(pi) = {plain.result()}")


if __name__ == "__main__":
    main()
