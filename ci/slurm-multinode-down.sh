#!/usr/bin/env bash
# slurm-multinode-down.sh -- undo ci/slurm-multinode-up.sh; the single-node cluster and munged
# are left alone.
#
# Cancels this cluster's jobs, stops its slurmd's and slurmctld (only the pids in its pid files,
# never anything found by name), ends what still runs inside the node namespaces (deleting a
# network namespace does not end its processes), then deletes the veths, namespaces, bridge and
# the /etc/hosts lines it added. Config, job state and logs stay, as with ci/slurm-down.sh.
#   MN_DOWN_TIMEOUT=10     seconds each daemon gets after SIGTERM before SIGKILL
set -euo pipefail

MN_DOWN_TIMEOUT=${MN_DOWN_TIMEOUT:-10}
BR=hpcfmnbr
CONF=/etc/hpcfutures-slurm-mn/slurm.conf
PIDDIR=/run/hpcfutures-slurm-mn
HOSTS_TAG='# hpcfutures-slurm-mn'
export SLURM_CONF=$CONF   # scancel and squeue below must only ever see this cluster

LOG_TAG=slurm-mn-down
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "must be run as root"

# The nodes up made, and those an interrupted run left: a namespace mnN whose veth (ours) is
# still on this side.
nodes=$({ cat "$PIDDIR/nodes" 2>/dev/null || true
          for i in $(seq 9); do
            if ip link show "hpcfmn$i" >/dev/null 2>&1; then echo "mn$i"; fi
          done; } | sort -u)

# Jobs first, while the daemons still run, so Slurm ends the steps itself.
if running "$PIDDIR/slurmctld.pid" slurmctld; then
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs $jobs"
    # shellcheck disable=SC2086  # one word per job id
    timeout 10 scancel $jobs 2>/dev/null || true
    deadline=$((SECONDS + MN_DOWN_TIMEOUT))
    while [ "$SECONDS" -lt "$deadline" ] &&
      [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null || true)" ]; do
      sleep 0.2
    done
  fi
fi

pidfiles=()
for n in $nodes; do pidfiles+=("$PIDDIR/slurmd-$n.pid"); done
stop_pidfiles slurmd "$MN_DOWN_TIMEOUT" "${pidfiles[@]}"
stop_pidfiles slurmctld "$MN_DOWN_TIMEOUT" "$PIDDIR/slurmctld.pid"

for n in $nodes; do
  [ -e "/run/netns/$n" ] || continue
  left=$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')
  if [ -n "${left// /}" ]; then
    log "$n: ending what still runs there: pids $left"
    # shellcheck disable=SC2086  # one word per pid
    kill -TERM $left 2>/dev/null || true
    deadline=$((SECONDS + MN_DOWN_TIMEOUT))
    while [ -n "$(ip netns pids "$n" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.1
    done
    left=$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -z "${left// /}" ] || kill -KILL $left 2>/dev/null || true
  fi
  ip link del "hpcfmn${n#mn}" 2>/dev/null || true   # deletes both ends of the pair
  ip netns del "$n"
done
if ip link show "$BR" >/dev/null 2>&1; then ip link del "$BR"; fi

if grep -q " $HOSTS_TAG\$" /etc/hosts; then
  hosts=$(mktemp)
  grep -v " $HOSTS_TAG\$" /etc/hosts >"$hosts" || true
  cat "$hosts" >/etc/hosts   # in place: /etc/hosts may be a bind mount
  rm -f "$hosts"
fi
rm -rf "$PIDDIR"
rm -f /dev/hpcf-mn-gpu*   # the GPU node's stand-in devices (MN_GPUS in slurm-multinode-up.sh)
log "stopped (nodes: ${nodes//$'\n'/ }; the single-node cluster is untouched)"
