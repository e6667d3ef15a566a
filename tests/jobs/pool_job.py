"""A job whose tasks use multiprocessing.Pool, as tasks may (pool-cleanup tests)."""

import multiprocessing

import hpcfutures


def pooled_sum(n):
    with multiprocessing.Pool(2) as pool:  # leaving the block terminates the pool's processes
        return sum(pool.map(abs, range(-n, 0)))


with hpcfutures.Executor() as ex:
    results = list(ex.map(pooled_sum, [3, 4, 5, 6]))
    assert results == [6, 10, 15, 21], results
    assert ex.submit(abs, -1).result() == 1  # every worker still there
    print("POOL RESULTS OK", flush=True)
