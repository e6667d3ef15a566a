"""Clients from outside a launch: ``connect`` to a serving launch, ``stop`` it,
and ``allocate`` a batch job of one (batchjob) and connect to it."""
