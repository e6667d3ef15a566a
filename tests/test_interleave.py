"""Ranks that start in any order, late ones included, end with the client's status, promptly.

The short form of ``benchmarks/interleave.py``: under each launcher, a few seeded
launches whose ranks start 0-5 s apart (the scheduler's and the client's included),
with a pause at each step of every look-up.  The seeds were chosen to cover every way
the client can end and, for each launcher, a worker that starts after the client has
finished (the launch's end marker must send it home with status 0, at once).  The long
form (30 launches per launcher) is ``python benchmarks/interleave.py``.
"""

import sys

import pytest
from helpers import ROOT, have_mpi, require, slurm_is_up
from pace import scaled

sys.path.insert(0, str(ROOT))

from benchmarks import interleave

#: Seeds of the short form: every ending, and under each launcher but MPI (whose ranks
#: meet in MPI_Init) a worker 2 s or more later than the scheduler and client (9, 28,
#: 31, 32: it starts once the client is done); seed 0's workers start first.
SEEDS = {"run": (9, 32), "srun": (28, 31), "mpiexec": (0, 4), "array": (31, 9)}


def test_a_seed_draws_the_same_launch_every_time():
    assert interleave.Draw.of(11, 5.0) == interleave.Draw.of(11, 5.0)
    assert interleave.Draw.of(11, 5.0) != interleave.Draw.of(12, 5.0)
    assert {interleave.Draw.of(seed, 5.0).ending for seed in range(5)} == set(
        interleave.ENDINGS)


def test_the_short_form_meets_a_rank_that_starts_after_the_end():
    """At least one short-form launch has a worker whose delay exceeds both the
    scheduler's and the client's by more than a launch's start: it starts after the end."""
    late = [(name, seed) for name, seeds in SEEDS.items() for seed in seeds
            if (d := interleave.Draw.of(seed, 5.0).delays)
            and max(d[2:]) > max(d[:2]) + 2.0]
    assert late, "no seed of the short form starts a worker after its client's end"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", list(SEEDS))
def test_ranks_starting_in_any_order_end_with_the_clients_status(launcher):
    if launcher in ("srun", "array"):
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    if launcher == "mpiexec":
        require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    outcomes = [interleave.launch(launcher, seed, grace=scaled(5.0), timeout=scaled(120))
                for seed in SEEDS[launcher]]
    failed = [str(o) for o in outcomes if not o.passed]
    assert not failed, "\n\n".join(failed)
