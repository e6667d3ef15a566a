"""The client-side facade: what the user's thread calls.

The public executors (:mod:`.executor`, :mod:`.connect`) turn ``submit`` and
``map`` into batched Dask tasks (:mod:`.bridge`, :mod:`.mapping`,
:mod:`.bundles`) and hand back ``concurrent.futures.Future`` objects.  Nothing
here starts a process or decides a role: that is :mod:`hpcfutures._launch`.
"""
