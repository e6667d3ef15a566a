#!/usr/bin/env bash
# mpi-check.sh -- check that MPI from Python works here: 4 ranks (0-3) in one COMM_WORLD,
# first under `mpiexec -n 4`, then (if the local Slurm is up) under `srun --mpi=pmi2 -n4`.
#
# Expects mpi4py and the MPICH wheel in the Python that runs it:
#   python3 -m pip install mpi4py mpich
# (The `mpich` wheel's ch4:ucx build works with PMI2; `srun --mpi=pmix` does not work with it.)
#
# Settings (environment): PYTHON=python3, MPI_CHECK_TIMEOUT=60 (seconds per command).
set -euo pipefail

PYTHON=${PYTHON:-python3}
MPI_CHECK_TIMEOUT=${MPI_CHECK_TIMEOUT:-60}
# Keep MPI on loopback: the MPICH wheel uses UCX, which would otherwise probe every interface.
export UCX_NET_DEVICES=lo HYDRA_IFACE=lo

LOG_TAG=mpi-check
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

# Rank 0 gathers every rank over MPI and prints one line; a working launch gives exactly
#   size 4 ranks [0, 1, 2, 3]
# Four MPI singletons (the typical failure) would print "size 1 ranks [0]" four times instead.
# One line from one process also avoids the launcher interleaving output from several ranks.
PROG='from mpi4py import MPI
c = MPI.COMM_WORLD
ranks = c.gather(c.Get_rank(), root=0)
if c.Get_rank() == 0:
    print(f"size {c.Get_size()} ranks {sorted(ranks)}", flush=True)'
EXPECTED='size 4 ranks [0, 1, 2, 3]'

# check LABEL CMD... PYTHON -c PROG: run the command under a timeout and compare its stdout
# with EXPECTED (stderr is kept apart, so harmless warnings do not fail the check, and shown
# on failure).
errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT
check() {
  local label=$1 out rc=0
  shift
  log "$label: ${*:1:$#-2} <gather ranks>"
  out=$(timeout "$MPI_CHECK_TIMEOUT" "$@" 2>"$errfile") || rc=$?
  if [ "$rc" != 0 ] || [ "$out" != "$EXPECTED" ]; then
    log "$label: stdout:"$'\n'"$out"
    log "$label: stderr:"$'\n'"$(cat "$errfile")"
    [ "$rc" = 0 ] || die "$label exited with status $rc (124 means it timed out after ${MPI_CHECK_TIMEOUT}s)"
    die "$label: expected '$EXPECTED'"
  fi
  log "$label: ok (ranks 0-3, size 4)"
}

timeout "$MPI_CHECK_TIMEOUT" "$PYTHON" -c 'import mpi4py' 2>/dev/null ||
  die "mpi4py is not importable by $PYTHON; run: $PYTHON -m pip install mpi4py mpich"
command -v mpiexec >/dev/null || die "mpiexec not on PATH; run: $PYTHON -m pip install mpich"

check mpiexec mpiexec -n 4 "$PYTHON" -c "$PROG"

if command -v srun >/dev/null && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
  # MpiDefault=none in ci/slurm-up.sh, so the PMI plug-in must be chosen here; without it every
  # task would be an MPI singleton.
  check "srun pmi2" srun --mpi=pmi2 -n4 -t 2 -J mpi-check "$PYTHON" -c "$PROG"
else
  log "srun: skipped (Slurm is not running)"
fi
log "all MPI checks passed"
