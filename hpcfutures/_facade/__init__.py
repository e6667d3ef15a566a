"""The client-side facade: what the user's thread calls.

The public executors (:mod:`.executor`, :mod:`.connect`) hand calls to the one
batching engine (:mod:`.batching`, fed by the streams in :mod:`.mapping` and
:mod:`.bundles`), which the bridge (:mod:`.bridge`, :mod:`.sending`,
:mod:`.completions`) turns into Dask tasks and back into
``concurrent.futures.Future`` objects.  Nothing here starts a process or
decides a role: that is :mod:`hpcfutures._launch`.
"""
