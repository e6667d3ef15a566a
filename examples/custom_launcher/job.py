"""A search on the toy batch system, through the ToyLauncher plug-in.

Start three copies the way the toy batch system would (from this directory,
so that ``toy_launcher`` can be imported)::

    for task in 0 1 2; do
        TOY_JOB_ID=42 TOY_TASK_ID=$task TOY_NTASKS=3 TOY_NNODES=1 python job.py &
    done; wait

Copy 0 runs the scheduler, copy 1 this script's client code, copy 2 a worker.
``launcher="toy_launcher:ToyLauncher"`` names the plug-in by module and class,
so nothing has to be installed; with the plug-in registered under the
``hpcfutures.launchers`` entry-point group, ``hpcfutures.Executor()`` would
find it by itself.
"""

import hpcfutures

LIMIT = 10_000


def collatz_steps(start: int) -> int:
    """Steps the Collatz sequence from ``start`` takes to reach 1."""
    steps, n = 0, start
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def main() -> None:
    with hpcfutures.Executor(launcher="toy_launcher:ToyLauncher") as ex:
        starts = range(1, LIMIT)
        steps = list(ex.map(collatz_steps, starts, chunksize=500))
    longest = max(starts, key=lambda start: steps[start - 1])
    print(f"longest Collatz chain below {LIMIT:,} starts at {longest} "
          f"({steps[longest - 1]} steps)")


if __name__ == "__main__":
    main()
