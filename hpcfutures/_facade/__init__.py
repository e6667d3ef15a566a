"""The client-side facade: what the user's thread calls.

Rooms, from the top floor down::

    outside/   clients from outside the launch: connect() to a serving one,
               allocate() a batch job and connect to it (batchjob)
    executor   the public executors; maps: map() with its streams and windows;
    bridge     the hub between concurrent.futures futures and Dask tasks
    resuming/  the journal (records, fingerprints, a map's lookups) and draining
               before the time limit: what a run resumes from
    mpi/       MPI calls: the mpi_task wrapper, reservations, lanes of groups
    core/      the executor's engine: futures, arguments, the batching engine
               and its streams (bundles, mapping), sending, completions,
               recovery, the roster, capacity, closing, progress

Nothing here starts a process or decides a role: that is :mod:`hpcfutures._launch`.
"""
