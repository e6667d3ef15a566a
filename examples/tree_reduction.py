"""A reduction that narrows: wide first, then fewer and fewer tasks.

    sbatch examples/slurm_array_release.sh     # each worker its own array element
    python examples/tree_reduction.py          # the same on a laptop

Round 1 sums 64 blocks of a large range in parallel, round 2 combines them in
8 groups, round 3 is one long final pass over the last 8 numbers.  With ``release_idle_after`` set,
the workers that have nothing left to do after round 1 retire and their array
elements end, handing their CPUs back to the cluster while rounds 2 and 3 run.
"""

import itertools
import time

import hpcfutures

N = 64_000_000
BLOCKS = 64


def block_sum(start: int, stop: int) -> int:
    """Sum of squares over [start, stop), the slow way, as real work would be."""
    return sum(x * x for x in range(start, stop, 997)) + (stop - start)


def combine(values: list[int]) -> int:
    time.sleep(0.3)  # stands for a costlier merge step
    return sum(values)


def final_pass(values: list[int]) -> int:
    time.sleep(3)  # the last step is long and serial: most workers have nothing to do
    return sum(values)


def main() -> None:
    edges = [N * i // BLOCKS for i in range(BLOCKS + 1)]
    # release_idle_after / min_workers also come from HPCFUTURES_RELEASE_IDLE_AFTER
    # and HPCFUTURES_MIN_WORKERS, as the batch script sets them.
    with hpcfutures.Executor() as ex:
        partial = list(ex.map(block_sum, edges[:-1], edges[1:]))             # 64 tasks
        groups = [partial[i:i + 8] for i in range(0, BLOCKS, 8)]
        merged = list(ex.map(combine, groups))                                # 8 tasks
        total = ex.submit(final_pass, merged).result()                        # 1 task
    expected = sum(block_sum(a, b) for a, b in itertools.pairwise(edges))
    verdict = "correct" if total == expected else "WRONG"
    print(f"tree reduction of {BLOCKS} blocks: {total} ({verdict})")


if __name__ == "__main__":
    main()
