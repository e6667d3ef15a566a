"""Calls that are MPI programs: the ``mpi_task`` wrapper, the reservation of
ranks for each call (mpicalls) and the lanes that group a map's calls."""
