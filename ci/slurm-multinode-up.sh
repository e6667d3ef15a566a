#!/usr/bin/env bash
# slurm-multinode-up.sh -- a Slurm cluster of MN_NODES compute nodes on this one machine, for
# hpcfutures' multi-node tests (tests/test_multinode.py).
#
# Each node mnN is a slurmd in network, UTS and mount namespaces of its own: hostname mnN, only
# `lo` and `eth0` (10.77.0.1N/24), its own /sys. Job steps inherit all three, so 127.0.0.1 is
# that node's own loopback and ranks on different nodes talk only over 10.77.0.0/24:
#
#   this machine: login node + controller (slurmctld, in a UTS namespace named mnctl)
#     bridge $BR 10.77.0.1/24 -- veth -- eth0 10.77.0.11 in netns mn1: slurmd -N mn1
#                             -- veth -- eth0 10.77.0.12 in netns mn2: slurmd -N mn2 ...
#
# Shared between nodes, as on a cluster with a shared home: the filesystem (/tmp too) and munge.
# Shared unlike on a cluster: the kernel, hence the pid space and shared memory (MPI over UCX
# then takes shared memory between "nodes" unless told UCX_TLS=^sm,cma).
#
# Beside the single-node cluster of ci/slurm-up.sh, never instead of it: its own config
# ($CONF; clients select it with SLURM_CONF=$CONF), ports 6917/6918, ClusterName=hpcfmn, job ids
# from 7700, spool, pid and log directories. Slurm and munge come from ci/slurm-up.sh, which must
# have run first (it installs them and starts munged); this script adds only iproute2 if missing.
#
# Idempotent: running daemons are kept; a changed slurm.conf (other MN_NODES or MN_CPUS)
# restarts this cluster's daemons. ci/slurm-multinode-down.sh undoes everything.
#
# Settings (environment):
#   MN_NODES=3             compute nodes mn1..mnN (1..9)
#   MN_CPUS=2              CPUs per node (config_overrides lets the sum exceed the real cores)
#   MN_GPUS=2              GPUs as a generic resource (GRES) on the last node only, on device files
#                          /dev/hpcf-mn-gpu* (as ci/slurm-up.sh does): a GPU node beside CPU nodes,
#                          for heterogeneous jobs with a GPU component; 0 for none
#   MN_DEFAULT_ROUTE=1     0: nodes without a default route, like an isolated compute network
#   MN_UP_TIMEOUT=60       seconds allowed for each wait (controller, idle nodes, probe step)
set -euo pipefail

MN_NODES=${MN_NODES:-3}
MN_CPUS=${MN_CPUS:-2}
MN_GPUS=${MN_GPUS:-2}
MN_DEFAULT_ROUTE=${MN_DEFAULT_ROUTE:-1}
MN_UP_TIMEOUT=${MN_UP_TIMEOUT:-60}

NET=10.77.0                          # node N is $NET.1N, the controller $NET.1
BR=hpcfmnbr                          # the bridge; node N's veth is hpcfmnN on this side
CONF=/etc/hpcfutures-slurm-mn/slurm.conf
PIDDIR=/run/hpcfutures-slurm-mn      # slurmctld.pid, slurmd-mnN.pid, nodes, cgroup-mnN/
LOGDIR=/var/log/hpcfutures-slurm-mn  # slurmctld.log, slurmd-mnN.log
SPOOL=/var/spool/hpcfutures-slurm-mn # ctld/ (job state), mnN/ (each slurmd's spool)
HOSTS_TAG='# hpcfutures-slurm-mn'    # ends every /etc/hosts line this script owns
# Every Slurm command below must reach this cluster, never the single-node one.
export SLURM_CONF=$CONF

LOG_TAG=slurm-mn-up
die_logs() {
  printf '%s\n' "$LOGDIR/slurmctld.log"
  local n
  for n in $(seq "$MN_NODES"); do printf '%s\n' "$LOGDIR/slurmd-mn$n.log"; done
}
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "must be run as root (it makes network namespaces and starts daemons)"
case "$MN_NODES" in [1-9]) ;; *) die "MN_NODES must be 1..9, got '$MN_NODES'" ;; esac
case "$MN_CPUS" in '' | *[!0-9]* | 0) die "MN_CPUS must be a positive number" ;; esac
case "$MN_GPUS" in '' | *[!0-9]*) die "MN_GPUS must be a number (0 for none)" ;; esac
t0=$SECONDS
nodes=()
for i in $(seq "$MN_NODES"); do nodes+=("mn$i"); done
node_ip() { echo "$NET.1${1#mn}"; }

# ----------------------------------------------------------------------------- 1. prerequisites
if ! command -v ip >/dev/null; then
  log "installing iproute2"
  timeout 600 apt-get install -y -qq --no-install-recommends iproute2 >/dev/null ||
    die "apt-get install iproute2 failed"
fi
for exe in ip nsenter unshare mountpoint /usr/sbin/slurmctld /usr/sbin/slurmd srun sinfo munge; do
  command -v "$exe" >/dev/null || die "$exe not found: run ci/slurm-up.sh first (it installs Slurm)"
done
timeout 10 sh -c 'munge -n | unmunge' >/dev/null 2>&1 ||
  die "no munged answers: run ci/slurm-up.sh first (it starts munged, which both clusters share)"

# ----------------------------------------------------------------------------- 2. slurm.conf
# Slurm's behaviour is the single-node cluster's (slurm_conf_policy in lib.sh; the reasons are in
# ci/slurm-up.sh). Different: the names, ports, directories and FirstJobId, which keep the two
# clusters apart (both would count job ids from 1, and files named after a job id alone would
# collide in the shared /tmp); NodeAddr, the node's own IP, so Slurm needs no name resolution;
# and SlurmctldHost, whose name slurmctld checks against its hostname (hence its UTS namespace
# below).
mkdir -p "$(dirname "$CONF")" "$PIDDIR" "$LOGDIR" "$SPOOL/ctld"
gpu_node=mn$MN_NODES
new_gres=$(mktemp)
if [ "$MN_GPUS" -gt 0 ]; then
  stand_in_gpus /dev/hpcf-mn-gpu "$MN_GPUS" ci/slurm-multinode-up.sh "$gpu_node" >"$new_gres"
fi
new_conf=$(mktemp)
{
  cat <<EOF
# Written by hpcfutures ci/slurm-multinode-up.sh -- $MN_NODES-node test cluster. Edits are overwritten.
ClusterName=hpcfmn
SlurmctldHost=mnctl($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6917
SlurmdPort=6918
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$PIDDIR/slurmctld.pid
SlurmdPidFile=$PIDDIR/slurmd-%n.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd-%n.log
FirstJobId=7700
EOF
  slurm_conf_policy none
  # Heterogeneous jobs are started only by the backfill scheduler, every bf_interval (30 s by
  # default): each het test waited about that long for its allocation.
  echo "SchedulerParameters=bf_interval=2"
  if [ "$MN_GPUS" -gt 0 ]; then
    echo "GresTypes=gpu"
  fi
  for n in "${nodes[@]}"; do
    gres=""
    # The GPU node weighs more, as sites make theirs: Slurm fills lighter nodes first, so a
    # heterogeneous job's CPU component does not take the one node its GPU component needs
    # (components never share a node; the GPU one then waited for the CPU one to end).
    if [ "$MN_GPUS" -gt 0 ] && [ "$n" = "$gpu_node" ]; then gres="Gres=gpu:$MN_GPUS Weight=10 "; fi
    echo "NodeName=$n ${gres}NodeAddr=$(node_ip "$n") NodeHostname=$n CPUs=$MN_CPUS Boards=1" \
      "SocketsPerBoard=1 CoresPerSocket=$MN_CPUS ThreadsPerCore=1 RealMemory=2048 State=UNKNOWN"
  done
  echo "PartitionName=mn Nodes=mn[1-$MN_NODES] Default=YES MaxTime=INFINITE State=UP"
} >"$new_conf"
GRES_CONF=$(dirname "$CONF")/gres.conf
if cmp -s "$new_conf" "$CONF" && ! gres_differs "$new_gres" "$GRES_CONF"; then
  rm -f "$new_conf" "$new_gres"
else
  install -m 0644 "$new_conf" "$CONF"
  put_gres "$new_gres" "$GRES_CONF"
  rm -f "$new_conf" "$new_gres"
  log "wrote $CONF ($MN_GPUS GPU(s) on $gpu_node)"
  # Node changes need a restart, not `scontrol reconfigure`. Nodes beyond MN_NODES go entirely.
  old_nodes=$(cat "$PIDDIR/nodes" 2>/dev/null || true)
  pidfiles=("$PIDDIR/slurmctld.pid")
  for n in $old_nodes; do pidfiles+=("$PIDDIR/slurmd-$n.pid"); done
  stop_pidfiles slurmd "$MN_UP_TIMEOUT" "${pidfiles[@]:1}"
  stop_pidfiles slurmctld "$MN_UP_TIMEOUT" "${pidfiles[0]}"
  for n in $old_nodes; do
    if [ "${n#mn}" -gt "$MN_NODES" ]; then
      log "removing node $n"
      ip link del "hpcfmn${n#mn}" 2>/dev/null || true
      ip netns del "$n" 2>/dev/null || true
    fi
  done
fi
printf '%s\n' "${nodes[@]}" >"$PIDDIR/nodes"    # for ci/slurm-multinode-down.sh

# ----------------------------------------------------------------------------- 3. network
ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
ip addr replace "$NET.1/24" dev "$BR"
ip link set "$BR" up
for n in "${nodes[@]}"; do
  veth=hpcfmn${n#mn}
  [ -e "/run/netns/$n" ] || ip netns add "$n"
  if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
    ip link del "$veth" 2>/dev/null || true      # half of a pair from an interrupted run
    ip link add "$veth" type veth peer name eth0 netns "$n"
  fi
  ip link set "$veth" master "$BR" up
  ip -n "$n" link set lo up
  ip -n "$n" addr replace "$(node_ip "$n")/24" dev eth0
  ip -n "$n" link set eth0 up
  # The route leads to this machine only (ip_forward is not touched), but it gives the node an
  # "outward" address, as real nodes have: the one Dask's default choice finds.
  if [ "$MN_DEFAULT_ROUTE" = 1 ]; then
    ip -n "$n" route replace default via "$NET.1" dev eth0
  else
    ip -n "$n" route del default 2>/dev/null || true
  fi
done

# /etc/hosts: the node names, for people and for programs that resolve a hostname. Rewritten in
# place (it may be a bind mount), only the lines carrying our tag.
hosts=$(mktemp)
grep -v " $HOSTS_TAG\$" /etc/hosts >"$hosts" || true
echo "$NET.1 mnctl $HOSTS_TAG" >>"$hosts"
for n in "${nodes[@]}"; do echo "$(node_ip "$n") $n $HOSTS_TAG" >>"$hosts"; done
cmp -s "$hosts" /etc/hosts || cat "$hosts" >/etc/hosts
rm -f "$hosts"

# ----------------------------------------------------------------------------- 4. daemons
if running "$PIDDIR/slurmctld.pid" slurmctld; then
  log "slurmctld already running (pid $(cat "$PIDDIR/slurmctld.pid"))"
else
  log "starting slurmctld (hostname mnctl, $NET.1:6917)"
  unshare --uts sh -c "hostname mnctl && exec /usr/sbin/slurmctld -f '$CONF'" ||
    die "slurmctld failed to start"
fi
wait_for "$MN_UP_TIMEOUT" "slurmctld to answer 'scontrol ping'" \
  sh -c 'timeout 10 scontrol ping | grep -q "is UP"'

# A node's slurmd enters its netns, and makes a UTS namespace (hostname) and a mount namespace
# in which a sysfs of the netns covers /sys, so that /sys/class/net lists the node's own
# interfaces (UCX and hwloc read it). That sysfs would also hide the cgroup tree, without which
# slurmd 22.05 refuses to start (even with proctrack/linuxproc), so the tree is carried over.
start_slurmd() {
  local n=$1 aside="$PIDDIR/cgroup-$1"
  mkdir -p "$aside" "$SPOOL/$n"
  nsenter --net="/run/netns/$n" unshare --mount --uts --propagation slave sh -ec "
    if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup '$aside'; fi
    mount -t sysfs sysfs /sys
    if mountpoint -q '$aside'; then mount --move '$aside' /sys/fs/cgroup; fi
    hostname '$n'
    exec /usr/sbin/slurmd -f '$CONF' -N '$n'"
}
for n in "${nodes[@]}"; do
  if running "$PIDDIR/slurmd-$n.pid" slurmd; then
    log "slurmd $n already running (pid $(cat "$PIDDIR/slurmd-$n.pid"))"
  else
    log "starting slurmd $n ($(node_ip "$n"):6918)"
    start_slurmd "$n" || die "slurmd $n failed to start"
  fi
done

# ----------------------------------------------------------------------------- 5. ready?
# all_idle: every node idle; one left down or drained by an earlier run is resumed.
all_idle() {
  local states
  states=$(timeout 10 sinfo -h -N -p mn -o '%N %T' 2>/dev/null) || return 1
  awk '$2 ~ /^(down|drain)/ {print $1}' <<<"$states" | while read -r bad; do
    timeout 10 scontrol update NodeName="$bad" State=RESUME >/dev/null 2>&1 || true
  done
  [ "$(grep -c ' idle$' <<<"$states")" = "$MN_NODES" ]
}
wait_for "$MN_UP_TIMEOUT" "$MN_NODES idle nodes" all_idle

# The probe: one task per node, each naming its node. Retried, since a restarted slurmctld can
# report nodes idle from saved state before their slurmd has registered again.
want=$(printf '%s\n' "${nodes[@]}")
probe() {
  [ "$(timeout 30 srun -N "$MN_NODES" -n "$MN_NODES" -t 1 -J mn-up-probe hostname | sort)" = "$want" ]
}
wait_for "$MN_UP_TIMEOUT" "the probe 'srun -N $MN_NODES hostname' to print ${nodes[*]}" probe

log "ready in $((SECONDS - t0)) s: $(sinfo -h -o '%P %a, %D node(s) %N, %c CPUs each');" \
  "use it with SLURM_CONF=$CONF"
