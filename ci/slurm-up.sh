#!/usr/bin/env bash
# slurm-up.sh -- start a real single-node Slurm cluster on this machine, for hpcfutures' tests.
#
# Target: Debian 12 (Slurm 22.05), run as root, no systemd needed. One node called `localhost`
# (whatever the real hostname is) in one partition `debug`.
#
# Idempotent: packages are installed only when missing, slurm.conf is rewritten only when its
# content changes (then slurmctld and slurmd are restarted), and running daemons are kept. Pid files of the daemons
# this script starts go to $PIDDIR; ci/slurm-down.sh stops exactly those.
#
# Settings (environment):
#   SLURM_CPUS=16            CPUs advertised for the node (may exceed the real core count:
#                            the suite runs three test processes, each launching up to 4 tasks)
#   SLURM_MPI_DEFAULT=none   MpiDefault; pick pmi2/pmix per step with `srun --mpi=...`
#   SLURM_WITH_PMIX=1        make `srun --mpi=pmix` work (libpmix2 + one symlink); empty to skip
#   SLURM_UP_TIMEOUT=60      seconds allowed for each wait (daemon start, idle node, probe)
#   SLURM_APT_TIMEOUT=600    seconds allowed for apt-get update + install
#   SLURM_SKIP_INSTALL=0     1: never call apt-get (fail if the packages are missing)
#   SLURM_GPUS=4             GPUs as a generic resource (GRES) on device files /dev/hpcf-gpu0.. made
#                            here: Slurm sets CUDA_VISIBLE_DEVICES for the jobs and steps that ask for
#                            them, as on a GPU node (tests/test_resources.py); jobs that ask for none
#                            see no difference. 0: none
set -euo pipefail

SLURM_CPUS=${SLURM_CPUS:-16}
SLURM_MPI_DEFAULT=${SLURM_MPI_DEFAULT:-none}
SLURM_WITH_PMIX=${SLURM_WITH_PMIX-1}
SLURM_UP_TIMEOUT=${SLURM_UP_TIMEOUT:-60}
SLURM_APT_TIMEOUT=${SLURM_APT_TIMEOUT:-600}
SLURM_SKIP_INSTALL=${SLURM_SKIP_INSTALL:-0}
SLURM_GPUS=${SLURM_GPUS:-4}
GRES_CONF=/etc/slurm/gres.conf

PIDDIR=/run/hpcfutures-slurm        # munged.pid, slurmctld.pid, slurmd.pid
LOGDIR=/var/log/hpcfutures-slurm    # slurmctld.log, slurmd.log
CONF=/etc/slurm/slurm.conf
MUNGE_PID=/run/munge/munged.pid     # munged runs as `munge` and cannot write into $PIDDIR
MUNGE_LOG=/var/log/munge/munged.log

LOG_TAG=slurm-up
die_logs() { printf '%s\n' "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" "$MUNGE_LOG"; }
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

# stop_daemon NAME: SIGTERM to the pid in $PIDDIR/NAME.pid, SIGKILL if it outlives the deadline.
stop_daemon() {
  local pid deadline
  pid=$(cat "$PIDDIR/$1.pid")
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + SLURM_UP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; break; fi
    sleep 0.1
  done
  rm -f "$PIDDIR/$1.pid"
}

[ "$(id -u)" = 0 ] || die "must be run as root"
t0=$SECONDS

# ----------------------------------------------------------------------------- 1. packages
pkgs=(munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins)
# PMIx must be loadable before slurmd starts, or slurmd never loads mpi/pmix (see the symlink below).
if [ -n "$SLURM_WITH_PMIX" ]; then pkgs+=(libpmix2); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$SLURM_SKIP_INSTALL" != 1 ] || die "missing packages ${missing[*]} (SLURM_SKIP_INSTALL=1)"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The daemons are started below, by hand, with our config. Stop the package scripts from
  # starting the Debian defaults first: a temporary policy-rc.d that says "no", unless the
  # machine already has one (Docker-style images do).
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  timeout "$SLURM_APT_TIMEOUT" apt-get update -qq || die "apt-get update failed or timed out"
  timeout "$SLURM_APT_TIMEOUT" apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null || die "apt-get install ${missing[*]} failed or timed out"
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
  log "packages installed ($((SECONDS - t0)) s)"
fi
for exe in munged slurmctld slurmd; do
  [ -x "/usr/sbin/$exe" ] || die "/usr/sbin/$exe not found after installation"
done

# Slurm's mpi/pmix plug-in dlopens the unversioned .../pmix2/lib/libpmix.so, which only the
# libpmix-dev package (autotools and all) provides; libpmix2 alone leaves `srun --mpi=pmix`
# failing with "can not load PMIx library". The one symlink libpmix-dev would add is enough.
PMIX_LIBDIR=/usr/lib/x86_64-linux-gnu/pmix2/lib
pmix_link_added=0
if [ -n "$SLURM_WITH_PMIX" ] && [ -e "$PMIX_LIBDIR/libpmix.so.2" ] && [ ! -e "$PMIX_LIBDIR/libpmix.so" ]; then
  ln -s libpmix.so.2 "$PMIX_LIBDIR/libpmix.so"
  pmix_link_added=1
  log "linked $PMIX_LIBDIR/libpmix.so -> libpmix.so.2 (for srun --mpi=pmix)"
fi

# ----------------------------------------------------------------------------- 2. dirs, munge key
mkdir -p "$PIDDIR" "$LOGDIR" /var/spool/slurmctld /var/spool/slurmd /etc/slurm
# /run is a tmpfs: munge's runtime directory may be gone after a reboot.
mkdir -p /run/munge /var/lib/munge /var/log/munge /etc/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge /etc/munge
chmod 0755 /run/munge
chmod 0700 /etc/munge /var/log/munge
chmod 0711 /var/lib/munge
if [ ! -s /etc/munge/munge.key ]; then   # Debian's postinst normally creates it
  log "creating /etc/munge/munge.key"
  mungekey --create --keyfile=/etc/munge/munge.key --force
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

# ----------------------------------------------------------------------------- 3. slurm.conf
# GPUs without GPUs: character devices like /dev/null, listed in gres.conf (AutoDetect=off, so
# Slurm looks for no vendor library). A changed gres.conf restarts the daemons as slurm.conf does.
gres=""
new_gres=$(mktemp)
if [ "$SLURM_GPUS" -gt 0 ]; then
  stand_in_gpus /dev/hpcf-gpu "$SLURM_GPUS" ci/slurm-up.sh >"$new_gres"
  gres="Gres=gpu:$SLURM_GPUS"
fi
# Why these settings (details in the project's Slurm notes):
# - NodeName=localhost + NodeAddr=127.0.0.1 + `slurmd -N localhost`: independent of the hostname.
# - SlurmdParameters=config_overrides: accept CPUs=16 on a 2-core machine instead of draining.
# - proctrack/linuxproc, task/none, jobacct_gather/none: no cgroups needed (containers, no systemd).
# - CR_Core: memory is not consumable, so jobs never wait for memory.
# - EnforcePartLimits=ALL: asking for more CPUs than exist fails at once instead of pending forever.
# - MailProg=/bin/true: there is no mail program; slurmctld logs errors otherwise.
# - KillWait=5: scancel sends SIGTERM, then SIGKILL 5 s later (default 30 s is slow for tests).
# - MinJobAge=60: `scontrol show job` keeps finished jobs for 60 s (there is no accounting).
new_conf=$(mktemp)
{
  cat <<EOF
# Written by hpcfutures ci/slurm-up.sh -- single-node test cluster. Edits are overwritten.
ClusterName=hpcfutures
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$PIDDIR/slurmctld.pid
SlurmdPidFile=$PIDDIR/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
EOF
  slurm_conf_policy "$SLURM_MPI_DEFAULT"
  if [ -n "$gres" ]; then echo "GresTypes=gpu"; fi
  cat <<EOF
NodeName=localhost $gres NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$SLURM_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$SLURM_CPUS ThreadsPerCore=1 RealMemory=4096 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
} >"$new_conf"
conf_changed=0
if ! cmp -s "$new_conf" "$CONF"; then
  install -m 0644 "$new_conf" "$CONF"
  conf_changed=1
  log "wrote $CONF"
fi
rm -f "$new_conf"
if gres_differs "$new_gres" "$GRES_CONF"; then
  put_gres "$new_gres" "$GRES_CONF"
  conf_changed=1
  [ ! -s "$new_gres" ] || log "wrote $GRES_CONF ($SLURM_GPUS GPUs on /dev/hpcf-gpu*)"
fi
rm -f "$new_gres"

# ----------------------------------------------------------------------------- 4. daemons
# Each daemon forks into the background by itself and writes its own pid file.
if running "$PIDDIR/munged.pid" munged; then
  log "munged already running (pid $(cat "$PIDDIR/munged.pid"))"
elif running "$MUNGE_PID" munged; then
  # Someone else's munged: use it, but do not record it, so slurm-down.sh leaves it alone.
  log "using the munged that is already running (pid $(cat "$MUNGE_PID"))"
else
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID" --log-file="$MUNGE_LOG"
  cp "$MUNGE_PID" "$PIDDIR/munged.pid"
fi
wait_for "$SLURM_UP_TIMEOUT" "a munge credential round trip" sh -c 'timeout 5 munge -n | timeout 5 unmunge'

# A changed slurm.conf (e.g. another SLURM_CPUS) needs a restart of slurmctld and slurmd:
# `scontrol reconfigure` refuses node changes ("require restart of the slurmctld daemon").
if [ "$conf_changed" = 1 ]; then
  for d in slurmd slurmctld; do
    if running "$PIDDIR/$d.pid" "$d"; then
      log "config changed: restarting $d"
      stop_daemon "$d"
    fi
  done
fi

if running "$PIDDIR/slurmctld.pid" slurmctld; then
  log "slurmctld already running (pid $(cat "$PIDDIR/slurmctld.pid"))"
else
  log "starting slurmctld"
  /usr/sbin/slurmctld -f "$CONF" || die "slurmctld failed to start"
fi
wait_for "$SLURM_UP_TIMEOUT" "slurmctld to answer 'scontrol ping'" \
  sh -c 'timeout 10 scontrol ping | grep -q "is UP"'

if running "$PIDDIR/slurmd.pid" slurmd; then
  log "slurmd already running (pid $(cat "$PIDDIR/slurmd.pid"))"
  if [ "$pmix_link_added" = 1 ]; then
    log "WARNING: slurmd started before libpmix.so existed; for srun --mpi=pmix run" \
      "ci/slurm-down.sh && ci/slurm-up.sh"
  fi
else
  log "starting slurmd"
  /usr/sbin/slurmd -f "$CONF" -N localhost || die "slurmd failed to start"
fi

# ----------------------------------------------------------------------------- 5. ready?
# node_ready: the node is usable; a node left down/drained by an earlier run is resumed
# (ReturnToService=2 usually does that by itself once slurmd registers).
node_ready() {
  local state
  state=$(timeout 10 sinfo -h -n localhost -o '%T' 2>/dev/null | head -n 1)
  case "$state" in
    idle | mixed | allocated | completing) return 0 ;;
    down* | drain*) timeout 10 scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 ;;
  esac
  return 1
}
wait_for "$SLURM_UP_TIMEOUT" "node 'localhost' to become idle" node_ready

# A real one-task step. After a restart slurmctld can report the node idle from its saved state
# before slurmd has registered again, so the probe is retried until the deadline.
wait_for "$SLURM_UP_TIMEOUT" "the probe step 'srun -n1 true'" \
  timeout 20 srun -n1 -t 1 -J slurm-up-probe true

log "ready in $((SECONDS - t0)) s: $(sinfo -h -o '%P %a %D node(s) %T, %c CPUs')"
