"""What fetching results costs by each of Dask's two paths (issue 27).

hpcfutures' client fetches results straight from the worker that holds them
(``direct_to_workers=True``) when it can reach the workers, and through the
scheduler when it cannot (a client outside the cluster, through an SSH
forward: ``allocate(ssh=...)``).  This measures both on one machine, for many
small results and for large ones, with Dask alone (2 worker processes, TLS off,
127.0.0.1), so the difference is the path and nothing else.

    python benchmarks/gather_paths.py            # ~20 s on 2 cores
    python benchmarks/gather_paths.py --repeat 5

The figures of one run are in docs/remote.rst.  Through an SSH tunnel the
laptop's link dominates; the lab's 50 MiB through ssh and a jump host is timed
by tests/test_ssh_lab.py (printed with -s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

#: (label, number of results, bytes each)
CASES = [("1000 x 1 KiB", 1000, 1024), ("20 x 1 MiB", 20, 2**20), ("1 x 50 MiB", 1, 50 * 2**20)]


def _make(size: int, seed: int) -> bytes:
    return seed.to_bytes(8, "little") * (size // 8)


async def _one(client, count: int, size: int, direct: bool) -> float:
    futures = client.map(_make, [size] * count, range(count), pure=False)
    from distributed import wait

    await wait(futures)
    started = time.perf_counter()
    results = await client.gather(futures, direct=direct)
    took = time.perf_counter() - started
    assert len(results) == count and all(len(r) == size - size % 8 for r in results)
    await client.cancel(futures)
    return took


async def main(repeat: int) -> None:
    from distributed import Client, LocalCluster

    async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                            host="127.0.0.1", dashboard_address=None,
                            asynchronous=True) as cluster, \
            Client(cluster, asynchronous=True) as client:
        print("| results | straight from the workers | through the scheduler | ratio |")
        print("|---|---|---|---|")
        for label, count, size in CASES:
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(repeat):
                for direct in (True, False):  # interleaved: drift hits both alike
                    times[direct].append(await _one(client, count, size, direct))
            a, b = statistics.median(times[True]), statistics.median(times[False])
            print(f"| {label} | {a * 1000:.1f} ms | {b * 1000:.1f} ms | {b / a:.2f} x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main(parser.parse_args().repeat))
