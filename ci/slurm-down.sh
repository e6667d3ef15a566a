#!/usr/bin/env bash
# slurm-down.sh -- stop the single-node Slurm cluster started by ci/slurm-up.sh.
#
# Cancels leftover jobs, then stops slurmd, slurmctld and munged -- only the processes named in
# the pid files under $PIDDIR, never anything found by name. SIGTERM first, SIGKILL if a daemon
# is still alive after SLURM_DOWN_TIMEOUT seconds. Packages, config and state stay in place, so
# ci/slurm-up.sh brings the cluster back in a few seconds.
set -euo pipefail

SLURM_DOWN_TIMEOUT=${SLURM_DOWN_TIMEOUT:-10}
PIDDIR=/run/hpcfutures-slurm

LOG_TAG=slurm-down
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

# stop NAME: stop the daemon whose pid is in $PIDDIR/NAME.pid, if that process is still NAME.
stop() {
  local name=$1 file="$PIDDIR/$1.pid" pid deadline
  if [ ! -s "$file" ]; then
    log "$name: no pid file, nothing to stop"
    return 0
  fi
  pid=$(cat "$file")
  # A stale pid file may name a pid that now belongs to another process: leave that alone.
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]; then
    log "$name: pid $pid is not running $name (stale pid file)"
    rm -f "$file"
    return 0
  fi
  log "$name: SIGTERM to pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + SLURM_DOWN_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still alive after ${SLURM_DOWN_TIMEOUT}s, SIGKILL to pid $pid"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

# Cancel jobs first, while slurmctld and slurmd still run, so job steps are killed by Slurm
# rather than left behind as orphans of a dead slurmd. Waiting for the queue to drain is
# bounded; whatever remains after that is killed with slurmd.
if [ -s "$PIDDIR/slurmctld.pid" ] && command -v scancel >/dev/null; then
  timeout 10 scancel --partition=debug 2>/dev/null || true   # every job, any user
  deadline=$((SECONDS + SLURM_DOWN_TIMEOUT))
  while [ "$SECONDS" -lt "$deadline" ] &&
    [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null || true)" ]; do
    sleep 0.2
  done
fi

stop slurmd
stop slurmctld
stop munged
log "stopped"
