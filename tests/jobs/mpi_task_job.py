"""Every case of issue 20 in one launch of 8 ranks (mpiexec or srun --mpi=pmi2): 6 workers.

Prints one CHECK line per case and MPI TASKS OK at the end.  With the argument
``dies`` (under 6 ranks), a member raises while its partner waits for it forever
(the error must come at once), then a member's process dies: the MPI job must
end at once.
"""

import concurrent.futures
import os
import sys
import tempfile
import time

from mpi4py import MPI

import hpcfutures


def total(comm, x):
    """An allreduce over the call's ranks, and who took part."""
    world = MPI.COMM_WORLD.Get_rank()
    return comm.allreduce(comm.rank + x), comm.size, comm.allgather(world)


def held(comm, seconds):
    """Hold the group for a while; member 0 says when and where."""
    comm.Barrier()
    started = time.monotonic()
    time.sleep(seconds)
    comm.Barrier()
    return started, time.monotonic(), comm.allgather(MPI.COMM_WORLD.Get_rank())


def busy(seconds, marker=None):
    started = time.monotonic()
    if marker:
        open(marker, "w").close()  # says it runs
    time.sleep(seconds)
    return started, time.monotonic()


def fails_on_one(comm):
    if comm.rank == 1:
        raise KeyError("member one fails")
    return "rank 0 was fine"


def doubled(comm, x):
    return comm.allreduce(x)


def fails_at_seven(comm, x):
    if x == 7 and comm.rank == 1:
        raise KeyError(f"item {x} fails on member one")
    return x


def fails_while_zero_waits(comm):
    if comm.rank == 1:
        raise KeyError("member one fails, member zero waits for it")
    comm.Barrier()  # forever: only MPI's rule ends it


def dies_on_one(comm):
    if comm.rank == 1:
        os._exit(3)  # the behaviour under test: a member's process dies mid-call
    comm.Barrier()  # ... while the other waits for it inside MPI


def check(name, condition, detail=""):
    print(f"CHECK {name}: {'ok' if condition else 'FAILED'} {detail}", flush=True)
    if not condition:
        sys.exit(1)


if sys.argv[1:] == ["dies"]:  # under mpiexec -n 6: 4 workers
    with hpcfutures.Executor() as ex:
        # the error comes at once though the other member waits for it forever
        started = time.monotonic()
        try:
            ex.submit(hpcfutures.mpi_task(fails_while_zero_waits, ranks=2)).result(timeout=30)
        except KeyError as err:
            seconds = time.monotonic() - started
            check("told at once", "member rank 1 of 2" in str(err.__cause__) and seconds < 10,
                  f"{seconds:.2f} s")
        ex.submit(hpcfutures.mpi_task(dies_on_one, ranks=2)).result(timeout=60)
    sys.exit("the call whose member died returned")

with hpcfutures.Executor() as ex:
    # an allreduce over 4 ranks gives the right sum, over 4 distinct worker ranks
    value, size, ranks = ex.submit(hpcfutures.mpi_task(total, ranks=4), 10).result(timeout=60)
    check("allreduce", (value, size) == (0 + 1 + 2 + 3 + 4 * 10, 4), (value, size))
    check("distinct workers", len(set(ranks)) == 4 and not {0, 1} & set(ranks), ranks)

    # every worker rank in one call: this also waits until all six have joined, which
    # the mixing check below needs (a late rank would leave a call a busy worker only)
    value, size, ranks = ex.submit(hpcfutures.mpi_task(total, ranks=6), 0).result(timeout=60)
    check("all six workers", (value, size) == (15, 6), (value, size, ranks))

    # two 2-rank calls granted, and run, while ordinary tasks run
    pair = hpcfutures.mpi_task(held, ranks=2)
    markers = [os.path.join(tempfile.mkdtemp(), f"plain-{i}") for i in range(2)]
    plain = [ex.submit(busy, 1.0, marker) for marker in markers]
    deadline = time.monotonic() + 30
    while not all(map(os.path.exists, markers)) and time.monotonic() < deadline:
        time.sleep(0.01)  # polls the markers, with a deadline
    calls = [ex.submit(pair, 1.0) for _ in range(2)]
    spans = [f.result(timeout=60) for f in calls]
    spans_plain = [f.result(timeout=60) for f in plain]
    starts = [s[0] for s in spans + spans_plain]
    ends = [s[1] for s in spans + spans_plain]
    check("two calls and plain tasks at once", max(starts) < min(ends), (starts, ends))
    check("disjoint groups", not set(spans[0][2]) & set(spans[1][2]), [s[2] for s in spans])

    # a call that waits for ranks can be cancelled, and holds up nobody after it
    holding = [ex.submit(pair, 1.0) for _ in range(2)]
    big = ex.submit(hpcfutures.mpi_task(total, ranks=6), 0)
    waiting = ex.map(hpcfutures.mpi_task(total, ranks=6), range(3), timeout=0.2)
    time.sleep(0.2)
    cancelled = big.cancel()
    try:  # the map's calls are cancelled when its iterator gives up
        next(waiting)
    except concurrent.futures.TimeoutError:  # not yet the built-in one on Python 3.10
        cancelled = cancelled and "map"
    started = time.monotonic()
    after = ex.submit(hpcfutures.mpi_task(total, ranks=6), 1).result(timeout=60)
    check("cancel while waiting", cancelled == "map" and after[1] == 6,
          f"{time.monotonic() - started:.2f} s after the cancel")
    [f.result(timeout=60) for f in holding]

    # a group of 1
    value, size, ranks = ex.submit(hpcfutures.mpi_task(total, ranks=1), 5).result(timeout=60)
    check("group of one", (value, size, len(ranks)) == (5, 1, 1), (value, size, ranks))

    # too many ranks: ValueError at submit, naming both numbers
    try:
        ex.submit(hpcfutures.mpi_task(total, ranks=7), 1)
    except ValueError as err:
        check("too many ranks", "7 ranks" in str(err) and "6 worker" in str(err), err)
    else:
        check("too many ranks", False, "no ValueError")

    # a member raising: its own type, the member rank named; the executor carries on
    try:
        ex.submit(hpcfutures.mpi_task(fails_on_one, ranks=2)).result(timeout=60)
    except KeyError as err:
        cause = str(err.__cause__)
        check("member raises", "member rank 1 of 2" in cause and "member one fails" in cause,
              cause)
    else:
        check("member raises", False, "no KeyError")

    # a future as an argument; then 50 small 2-rank calls in a map
    x = ex.submit(abs, -3)
    value = ex.submit(hpcfutures.mpi_task(doubled, ranks=2), x).result(timeout=60)
    check("future argument", value == 6, value)
    started = time.monotonic()
    results = list(ex.map(hpcfutures.mpi_task(doubled, ranks=2), range(50), timeout=120))
    check("map of 50", results == [2 * i for i in range(50)],
          f"{time.monotonic() - started:.2f} s")
    lazy = list(ex.map(hpcfutures.mpi_task(doubled, ranks=2), iter(range(9)), buffersize=4,
                       timeout=120))
    check("map with buffersize", lazy == [2 * i for i in range(9)], lazy)

    # one call of a map raises on one member: its error at its place; the calls run
    # with it on the same reservation go on, and the group's ranks come free
    seen = []
    try:
        for value in ex.map(hpcfutures.mpi_task(fails_at_seven, ranks=2), range(40),
                            chunksize=20, timeout=60):
            seen.append(value)
    except KeyError as err:
        cause = str(err.__cause__)
        check("map item raises", seen == list(range(7)) and "member rank 1 of 2" in cause
              and "item 7 fails on member one" in cause, (seen, cause))
    else:
        check("map item raises", False, "no KeyError")
    results = list(ex.map(hpcfutures.mpi_task(doubled, ranks=6), range(3), timeout=60))
    check("ranks free after it", results == [0, 6, 12], results)
    print("MPI TASKS OK", flush=True)
