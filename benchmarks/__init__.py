"""Benchmarks of hpcfutures side by side with its peers: ``python benchmarks/run.py``.

Not part of the library: nothing under ``hpcfutures/`` imports this package.
"""
