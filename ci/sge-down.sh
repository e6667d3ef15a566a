#!/usr/bin/env bash
# sge-down.sh -- stop the single-node Grid Engine started by ci/sge-up.sh.
#
# Deletes every job first (through qdel, so the shepherds take the jobs' processes with them),
# then stops sge_execd and sge_qmaster -- only the processes named in the pid files under
# $PIDDIR, never anything found by name. SIGTERM first; SIGKILL if a daemon is still alive after
# its deadline. Packages, spool and configuration stay, so ci/sge-up.sh is back in seconds.
#   SGE_DOWN_KEEP_JOBS=1     leave the jobs alone (running jobs then outlive the execd)
#   SGE_DOWN_TIMEOUT=30      seconds the qmaster gets to shut down (the execd gets a third)
set -uo pipefail

SGE_DOWN_TIMEOUT=${SGE_DOWN_TIMEOUT:-30}
PIDDIR=/run/hpcfutures-sge
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default

LOG_TAG=sge-down
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

# alive NAME PID: PID runs the program NAME
alive() { [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ]; }

# stop NAME SECONDS: stop the daemon whose pid is in $PIDDIR/NAME.pid, if it is still sge_NAME.
stop() {
  local name=sge_$1 file="$PIDDIR/$1.pid" limit=$2 pid deadline
  if [ ! -s "$file" ]; then
    log "$name: no pid file, nothing to stop"
    return 0
  fi
  pid=$(cat "$file")
  if ! alive "$name" "$pid"; then
    log "$name: pid $pid is not $name any more (stale pid file)"
    rm -f "$file"
    return 0
  fi
  log "$name: SIGTERM to pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + limit))
  while alive "$name" "$pid" && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "$name: still running after ${limit} s, SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$file"
}

jobs_left() { [ -n "$(timeout 10 qstat -u '*' 2>/dev/null)" ]; }

qmaster_pid=$(cat "$PIDDIR/qmaster.pid" 2>/dev/null || true)
if [ "${SGE_DOWN_KEEP_JOBS:-0}" != 1 ] && [ -n "$qmaster_pid" ] && alive sge_qmaster "$qmaster_pid" &&
   command -v qdel >/dev/null && jobs_left; then
  log "deleting all jobs"
  timeout 20 qdel -u '*' >/dev/null 2>&1 || true
  deadline=$((SECONDS + 10))
  while jobs_left && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if jobs_left; then
    log "jobs still listed after 10 s: forcing their deletion"
    timeout 20 qdel -f -u '*' >/dev/null 2>&1 || true
  fi
fi
stop execd $((SGE_DOWN_TIMEOUT / 3))
stop qmaster "$SGE_DOWN_TIMEOUT"
