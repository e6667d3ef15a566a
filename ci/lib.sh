# ci/lib.sh -- shell helpers shared by the ci/ scripts (source it; it runs nothing).
#
# Before sourcing, set LOG_TAG (the prefix of every line, e.g. slurm-up). A script whose
# failures are explained by daemon logs defines die_logs, printing one path per line; die
# then shows the last DIE_TAIL (default 20) lines of each that exists and is not empty.

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%T)" "$*" >&2; }

die() {
  log "ERROR: $*"
  if declare -F die_logs >/dev/null; then
    local f
    while IFS= read -r f; do
      [ -s "$f" ] || continue
      printf -- '----- last lines of %s\n' "$f" >&2
      tail -n "${DIE_TAIL:-20}" "$f" >&2
    done < <(die_logs)
  fi
  exit 1
}

# wait_for SECONDS WHAT CMD...: retry CMD every 0.2 s until it succeeds or SECONDS have passed.
wait_for() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

# running PIDFILE NAME: the pid in PIDFILE is alive, not a zombie, and is the program NAME
# (a stale pid file may name a pid that now belongs to something else).
running() {
  local pid state
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# slurm_conf_policy MPI_DEFAULT: the slurm.conf lines the test clusters share, how Slurm behaves
# rather than where it lives (why each one: ci/slurm-up.sh, step 3).
slurm_conf_policy() {
  cat <<EOF
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=$1
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
EnforcePartLimits=ALL
MailProg=/bin/true
KillWait=5
MinJobAge=60
EOF
}

# stand_in_gpus DEVICE COUNT WRITER [NODE]: GPUs without GPUs, for Slurm's GRES. Makes the
# character devices DEVICE0..DEVICE<COUNT-1> (like /dev/null) and prints the gres.conf that names
# them (AutoDetect=off, so Slurm looks for no vendor library), for NODE only if given. WRITER
# names the script in the file's first line.
stand_in_gpus() {
  local device=$1 count=$2 writer=$3 node=${4:-} i
  for i in $(seq 0 $((count - 1))); do
    [ -e "$device$i" ] || mknod "$device$i" c 1 3
  done
  printf '# Written by hpcfutures %s. Edits are overwritten.\nAutoDetect=off\n%sName=gpu File=%s[0-%d]\n' \
    "$writer" "${node:+NodeName=$node }" "$device" $((count - 1))
}

# gres_differs NEW GRES_CONF: whether putting NEW in place (an empty NEW: no gres.conf at all)
# would change GRES_CONF. put_gres NEW GRES_CONF does it.
gres_differs() {
  if [ -s "$1" ]; then ! cmp -s "$1" "$2"; else [ -e "$2" ]; fi
}
put_gres() {
  if [ -s "$1" ]; then install -m 0644 "$1" "$2"; else rm -f "$2"; fi
}

# stop_pidfiles NAME SECONDS PIDFILE...: SIGTERM to every daemon NAME named in the pid files (all
# at once, as daemons take seconds each to stop), SIGKILL to those still alive after SECONDS;
# the pid files are removed. A pid that no longer runs NAME is left alone.
stop_pidfiles() {
  local name=$1 limit=$2 file pid pids=() deadline
  shift 2
  for file in "$@"; do
    if running "$file" "$name"; then
      pid=$(cat "$file")
      log "$name: SIGTERM to pid $pid"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$file"
  done
  deadline=$((SECONDS + limit))
  for pid in "${pids[@]}"; do
    while [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] &&
      [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        log "$name: still alive after ${limit}s, SIGKILL to pid $pid"
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
  done
}
