#!/usr/bin/env bash
# sge-up.sh -- start a real single-node Grid Engine (Debian 12's Son of Grid Engine 8.1.9) for the tests.
#
# Run as root; no systemd needed. The one execution host is called `localhost` whatever the real
# hostname is (host_aliases maps every spelling of this machine to it), with one queue `all.q`,
# the parallel environments `smp` and `mpi`, a 1-second scheduler, and an unprivileged user that
# submits the tests' jobs (Grid Engine strips TMPDIR, LD_* and more from root's jobs).
#
# Idempotent: packages are installed only when missing, running daemons are kept (or adopted from
# their spool pid files), the configuration is re-applied on every run. The pid files of the
# daemons go to $PIDDIR; ci/sge-down.sh stops exactly those. Every wait has a deadline.
#
# Settings (environment):
#   SGE_SLOTS=16             slots of all.q@localhost (may exceed the core count; no load limits;
#                            the suite runs three test processes, each submitting up to 4 slots)
#   SGE_JOB_USER=hpcuser     unprivileged user created for submitting jobs ('' = create none)
#   SGE_UP_TIMEOUT=60        seconds allowed for each wait (daemon start, queue ready, probe)
#   SGE_APT_TIMEOUT=600      seconds allowed for apt-get update + install
#   SGE_SKIP_INSTALL=0       1: never call apt-get (fail if the packages are missing)
#   SGE_SKIP_PROBE=0         1: skip the closing 'qsub -sync y' job array
# Facts and pitfalls behind each step: ../../shared/SGE_NOTES.md (from the lab that tried it).
set -euo pipefail

SGE_SLOTS=${SGE_SLOTS:-16}
SGE_JOB_USER=${SGE_JOB_USER-hpcuser}
SGE_UP_TIMEOUT=${SGE_UP_TIMEOUT:-60}
SGE_APT_TIMEOUT=${SGE_APT_TIMEOUT:-600}
SGE_SKIP_INSTALL=${SGE_SKIP_INSTALL:-0}
SGE_SKIP_PROBE=${SGE_SKIP_PROBE:-0}

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
QMASTER_SPOOL=/var/spool/gridengine/qmaster
EXECD_SPOOL=/var/spool/gridengine/execd
SPOOLDB=/var/spool/gridengine/spooldb
NODE=localhost                      # the one name Grid Engine uses for this machine
PIDDIR=/run/hpcfutures-sge          # qmaster.pid, execd.pid of the daemons we run
LOGDIR=/var/log/hpcfutures-sge      # apt.log, qconf.log, daemon start-up output, probe.log
DAEMON_PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

LOG_TAG=sge-up DIE_TAIL=15
die_logs() {
  printf '%s\n' "$QMASTER_SPOOL/messages" "$EXECD_SPOOL/$NODE/messages"
  local f
  for f in "$LOGDIR"/*.log; do printf '%s\n' "$f"; done
}
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "run me as root (I install packages and start daemons)"
mkdir -p "$PIDDIR" "$LOGDIR"
started_at=$SECONDS

# ------------------------------------------------------------------ 1. the host name must resolve
host=$(hostname)
if ! timeout 10 getent hosts "$host" >/dev/null; then
  log "hostname '$host' does not resolve: adding '127.0.0.1 $host' to /etc/hosts"
  echo "127.0.0.1 $host" >>/etc/hosts
fi

# ------------------------------------------------------------------ 2. packages
install_packages() {
  local wanted=(gridengine-common gridengine-client gridengine-master gridengine-exec) missing=() p
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  [ "$SGE_SKIP_INSTALL" != 1 ] || die "missing packages ${missing[*]} and SGE_SKIP_INSTALL=1"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Answer the packages' questions (a purge forgets the answers, so always seed them).
  timeout 30 debconf-set-selections <<EOF
gridengine-common shared/gridengineconfig boolean true
gridengine-common shared/gridenginecell string $SGE_CELL
gridengine-common shared/gridenginemaster string $NODE
gridengine-client shared/gridengineconfig boolean true
gridengine-client shared/gridenginemaster string $NODE
EOF
  # The postinst scripts try to start the daemons (and an MTA) through invoke-rc.d. We start the
  # daemons ourselves, with pid files, so refuse that when the machine has no policy-rc.d.
  local own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  # gridengine-common needs some mailx; mailutils brings one without a mail daemon (bsd-mailx
  # would pull in exim4).
  local apt=(timeout "$SGE_APT_TIMEOUT" apt-get install -y -q --no-install-recommends mailutils "${missing[@]}")
  if ! "${apt[@]}" >"$LOGDIR/apt.log" 2>&1; then
    log "apt-get install failed; updating the package lists and trying again"
    timeout "$SGE_APT_TIMEOUT" apt-get update -q >>"$LOGDIR/apt.log" 2>&1 || true
    if ! "${apt[@]}" >>"$LOGDIR/apt.log" 2>&1; then
      [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
      die "apt-get install failed (see $LOGDIR/apt.log)"
    fi
  fi
  [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}
install_packages
[ -x /usr/lib/gridengine/sge_qmaster ] || die "gridengine is not installed"
id sgeadmin >/dev/null 2>&1 || die "user sgeadmin is missing (did the gridengine-common postinst run?)"

# ------------------------------------------------------------------ 3. cell files and spool
mkdir -p "$COMMON" "$QMASTER_SPOOL/job_scripts" "$SPOOLDB" "$EXECD_SPOOL"
chown sgeadmin:sgeadmin "$SGE_ROOT" "$SGE_ROOT/$SGE_CELL" "$COMMON" "$QMASTER_SPOOL" \
  "$QMASTER_SPOOL/job_scripts" "$SPOOLDB" "$EXECD_SPOOL"
[ -s "$COMMON/bootstrap" ] ||
  install -m 0644 -o sgeadmin -g sgeadmin /usr/share/gridengine/default-bootstrap "$COMMON/bootstrap"
if [ ! -e "$SPOOLDB/sge" ]; then   # a re-install without purge skips this in postinst
  log "creating the spool database"
  timeout 60 su -s /bin/sh -c "/usr/share/gridengine/scripts/init_cluster $SGE_ROOT $SGE_CELL $SPOOLDB sgeadmin" \
    sgeadmin >"$LOGDIR/init_cluster.log" 2>&1 || die "init_cluster failed (see $LOGDIR/init_cluster.log)"
fi

# A client calls itself gethostname() ('vm'), the qmaster reverse-resolves 127.0.0.1 ('localhost')
# and refuses the mismatch. host_aliases makes every name of this machine the one name $NODE.
aliases=$NODE
for name in "$host" "$(timeout 5 hostname -f 2>/dev/null || true)" "${host%%.*}"; do
  [ -n "$name" ] && [ "$name" != "$NODE" ] || continue
  case " $aliases " in *" $name "*) ;; *) aliases="$aliases $name" ;; esac
done
aliases_changed=0
if [ "$(cat "$COMMON/host_aliases" 2>/dev/null)" != "$aliases" ]; then
  echo "$aliases" >"$COMMON/host_aliases"
  chown sgeadmin:sgeadmin "$COMMON/host_aliases"
  aliases_changed=1
  log "host_aliases: $aliases"
fi

# ------------------------------------------------------------------ 4. sge_qmaster
# Daemons start from an empty environment: sge_execd hands its own environment to every job.
clean_env=(env -i PATH="$DAEMON_PATH" LANG=C.UTF-8 SGE_ROOT="$SGE_ROOT" SGE_CELL="$SGE_CELL")

adopt() {  # adopt NAME SPOOL_PIDFILE: take over a daemon started without our pid file
  if ! running "$PIDDIR/$1.pid" "sge_$1" && running "$2" "sge_$1"; then
    log "adopting the running sge_$1 (pid $(cat "$2"))"
    cp "$2" "$PIDDIR/$1.pid"
  fi
}
adopt qmaster "$QMASTER_SPOOL/qmaster.pid"
adopt execd "$EXECD_SPOOL/$NODE/execd.pid"
if [ "$aliases_changed" = 1 ] && running "$PIDDIR/qmaster.pid" sge_qmaster; then
  log "host_aliases changed: restarting the daemons"
  SGE_DOWN_KEEP_JOBS=1 bash "$(dirname "$0")/sge-down.sh" || true
fi

start_qmaster() {
  log "starting sge_qmaster"
  echo "$NODE" >"$COMMON/act_qmaster"
  chown sgeadmin:sgeadmin "$COMMON/act_qmaster"
  rm -f "$QMASTER_SPOOL/qmaster.pid" "$QMASTER_SPOOL/lock" "$PIDDIR/qmaster.pid"
  # It forks into the background as sgeadmin and writes its pid into the spool.
  (cd / && "${clean_env[@]}" timeout 60 /usr/lib/gridengine/sge_qmaster) >"$LOGDIR/qmaster.log" 2>&1 ||
    die "sge_qmaster did not start (see $LOGDIR/qmaster.log)"
  wait_for "$SGE_UP_TIMEOUT" "the qmaster's pid file" test -s "$QMASTER_SPOOL/qmaster.pid"
  cp "$QMASTER_SPOOL/qmaster.pid" "$PIDDIR/qmaster.pid"
}
if running "$PIDDIR/qmaster.pid" sge_qmaster; then
  log "sge_qmaster is running (pid $(cat "$PIDDIR/qmaster.pid"))"
else
  start_qmaster
fi
# Until it answers. Right after a kill -9 the old qmaster may still have looked alive (a zombie):
# start it once more if it vanished meanwhile.
deadline=$((SECONDS + SGE_UP_TIMEOUT))
restarted=0
until timeout 10 qconf -sh >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || die "sge_qmaster does not answer 'qconf -sh' after ${SGE_UP_TIMEOUT} s"
  if [ "$restarted" = 0 ] && ! running "$PIDDIR/qmaster.pid" sge_qmaster; then
    start_qmaster
    restarted=1
  fi
  sleep 0.3
done

# ------------------------------------------------------------------ 5. configuration (every run)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ask() { timeout 20 qconf "$@"; }
change() { timeout 20 qconf "$@" >>"$LOGDIR/qconf.log" 2>&1 || die "qconf $* failed (see $LOGDIR/qconf.log)"; }
# put SHOW_OPT NAME ADD_OPT MODIFY_OPT FILE: add the object, or modify it if it exists
put() { if ask "$1" "$2" >/dev/null 2>&1; then change "$4" "$5"; else change "$3" "$5"; fi; }
# set_keys FILE KEY VALUE...: rewrite 'KEY  old' lines of a qconf dump
set_keys() {
  local file=$1
  shift
  while [ $# -ge 2 ]; do
    sed -i "s|^$1 .*|$1 $2|" "$file"
    shift 2
  done
}

# Global: root may run jobs (the probe falls back to root without a job user); honour '#!' lines;
# execution hosts report every 5 s (a job that exits 99 to be requeued waits for the next report
# before it is dispatched again: 45-70 s with the default 40 s, about 11 s with 5 s);
# write each finished job to the accounting file at once (qacct lags up to 15 s otherwise).
ask -sconf global >"$work/global"
set_keys "$work/global" min_uid 0 min_gid 0 shell_start_mode unix_behavior load_report_time 00:00:05
awk -v value="accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00" '
  skip { if ($0 !~ /\\$/) skip = 0; next }                 # continuation lines of the old value
  /^reporting_params / { print "reporting_params " value; skip = ($0 ~ /\\$/); next }
  { print }' "$work/global" >"$work/global.new"
mv "$work/global.new" "$work/global"
change -Mconf "$work/global"
# Scheduler: a pass every second and right after each submit and finish (the default 15 s
# interval makes every job take 15 s).
ask -ssconf >"$work/sched"
set_keys "$work/sched" schedule_interval 0:0:1 flush_submit_sec 1 flush_finish_sec 1
change -Msconf "$work/sched"

ask -sh 2>/dev/null | grep -qx "$NODE" || change -ah "$NODE"
ask -ss 2>/dev/null | grep -qx "$NODE" || change -as "$NODE"

write_pe() {  # write_pe NAME ALLOCATION_RULE JOB_IS_FIRST_TASK
  cat >"$work/pe-$1" <<EOF
pe_name            $1
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $2
control_slaves     TRUE
job_is_first_task  $3
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
  put -sp "$1" -Ap -Mp "$work/pe-$1"
}
write_pe smp '$pe_slots' TRUE    # all slots on one host: threads or local processes
write_pe mpi '$fill_up' FALSE    # slots across hosts, for mpiexec (tight integration)

cat >"$work/host" <<EOF
hostname              $NODE
load_scaling          NONE
complex_values        NONE
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
EOF
put -se "$NODE" -Ae -Me "$work/host"

# The queue: more slots than cores and no load thresholds, so a test's array never waits for load.
{
  cat <<EOF
qname                 all.q
hostlist              $NODE
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               smp mpi
rerun                 FALSE
slots                 $SGE_SLOTS
tmpdir                /tmp
shell                 /bin/bash
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
EOF
  for limit in rt cpu fsize data stack core rss vmem; do
    printf 's_%-19s INFINITY\nh_%-19s INFINITY\n' "$limit" "$limit"
  done
} >"$work/all.q"
put -sq all.q -Aq -Mq "$work/all.q"

# ------------------------------------------------------------------ 6. sge_execd
if running "$PIDDIR/execd.pid" sge_execd; then
  log "sge_execd is running (pid $(cat "$PIDDIR/execd.pid"))"
else
  log "starting sge_execd"
  rm -f "$EXECD_SPOOL/$NODE/execd.pid" "$PIDDIR/execd.pid"
  (cd / && "${clean_env[@]}" timeout 60 /usr/lib/gridengine/sge_execd) >"$LOGDIR/execd.log" 2>&1 ||
    die "sge_execd did not start (see $LOGDIR/execd.log)"
  wait_for "$SGE_UP_TIMEOUT" "the execd's pid file" test -s "$EXECD_SPOOL/$NODE/execd.pid"
  cp "$EXECD_SPOOL/$NODE/execd.pid" "$PIDDIR/execd.pid"
fi
# The queue instance is usable once it reports a load and carries no state flag (a, u, E, d...).
queue_ready() {
  local fields
  fields=$(timeout 10 qstat -f -q "all.q@$NODE" 2>/dev/null | awk -v q="all.q@$NODE" '$1 == q') || return 1
  [ -n "$fields" ] || return 1
  set -- $fields
  [ "$4" != "-NA-" ] && [ -z "${6:-}" ]
}
timeout 10 qmod -c "all.q@$NODE" >/dev/null 2>&1 || true   # clear an error state left behind
timeout 10 qmod -e "all.q@$NODE" >/dev/null 2>&1 || true   # and a disabled one
wait_for "$SGE_UP_TIMEOUT" "queue instance all.q@$NODE" queue_ready

# ------------------------------------------------------------------ 7. the unprivileged job user
if [ -n "$SGE_JOB_USER" ] && ! id "$SGE_JOB_USER" >/dev/null 2>&1; then
  log "creating user $SGE_JOB_USER"
  timeout 30 useradd -m -s /bin/bash "$SGE_JOB_USER" || die "useradd $SGE_JOB_USER failed"
fi
ready_after=$((SECONDS - started_at))

# ------------------------------------------------------------------ 8. probe: a real job array
if [ "$SGE_SKIP_PROBE" != 1 ]; then
  user=${SGE_JOB_USER:-root}
  probe=$(mktemp -d /tmp/sge-probe.XXXXXX)
  cat >"$probe/probe.sh" <<'EOF'
#!/bin/bash
echo "task $SGE_TASK_ID of $SGE_TASK_FIRST-$SGE_TASK_LAST, job $JOB_ID, slots $NSLOTS"
EOF
  chmod 755 "$probe/probe.sh"
  chown -R "$user" "$probe"
  probe_start=$SECONDS
  (cd "$probe" && timeout "$SGE_UP_TIMEOUT" runuser -u "$user" -- \
    qsub -sync y -t 1-4 -cwd -j y -N sge-up-probe -o "$probe/out.\$TASK_ID" ./probe.sh) \
    >"$LOGDIR/probe.log" 2>&1 || die "the probe job array failed (see $LOGDIR/probe.log)"
  for task in 1 2 3 4; do
    grep -q "^task $task of 1-4, job " "$probe/out.$task" 2>/dev/null ||
      die "probe task $task printed '$(cat "$probe/out.$task" 2>/dev/null)'"
  done
  log "probe: a 4-task array as $user took $((SECONDS - probe_start)) s: $(cat "$probe/out.1")"
  rm -rf "$probe"
fi
log "Grid Engine ready in ${ready_after} s: $(timeout 10 qstat -f | awk '/^all.q@/ {print $1, "slots", $3, "load", $4}')"
