#!/usr/bin/env bash
# ssh-lab-up.sh -- a laptop outside the 3-node cluster, reaching it only through ssh via a jump
# host, for hpcfutures' SSH tests (issue 27, tests/test_ssh_lab.py). Run after
# ci/slurm-multinode-up.sh.
#
#   netns hpcflap (the laptop)          netns hpcfbast (jump host)        this machine: login node
#   user hpcflaptop, own /tmp           sshd 10.88.1.1:22                 sshd 10.88.2.1:2222
#   eth0 10.88.1.2/30 ==veth== 10.88.1.1 | 10.88.2.2 ==veth== 10.88.2.1   (:2223 forwarding off,
#                                                                          :2224 key + password)
#   no default route                    no default route                  sbatch -> slurmctld, mn1..3
#
# The cluster account hpcfcluster (login shell tcsh, as some sites still give) runs the jobs; the
# laptop runs as hpcflaptop, who cannot read the cluster account's files (0700 home, and the
# laptop helper hides that home, the Slurm config and munge's socket behind empty tmpfs mounts).
# The laptop's known_hosts pins both host keys: nothing accepts a new key. Nothing listens on
# port 22 of this machine's own namespace (the package's own start is blocked and checked).
#
# $LAB/laptop CMD...  runs CMD as the laptop (its netns, hostname "laptop", a private /tmp); the
# environment it gets: HOME, PATH (the lab's venv first), LAB_PYTHONPATH as PYTHONPATH.
#
# Idempotent: what exists is kept; sshd's are started when their pid file names no live sshd.
# ci/ssh-lab-down.sh undoes the namespaces and daemons.
set -euo pipefail

LAB=/opt/hpcfutures-ssh-lab          # venv/, laptop (the helper), src/ (tests' code copies)
ETC=/etc/hpcfutures-ssh-lab          # host keys, sshd configs
LOGDIR=/var/log/hpcfutures-ssh-lab
RUN=/run/hpcfutures-ssh-lab          # sshd pid files
MN_CONF=/etc/hpcfutures-slurm-mn/slurm.conf
CLUSTER_USER=hpcfcluster
LAPTOP_USER=hpcflaptop
LAB_PASSWORD=hpcf-lab-second-factor  # a lab's, for the "password after the key" sshd only
ROOT=$(cd "$(dirname "$0")/.." && pwd)

LOG_TAG=ssh-lab-up
die_logs() { printf '%s\n' "$LOGDIR"/{login,nofwd,twofactor,bastion}.log; }
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "must be run as root (namespaces, users, sshd)"
[ -f "$MN_CONF" ] || die "no $MN_CONF: run ci/slurm-multinode-up.sh first"
t0=$SECONDS

# 1. openssh-server and tcsh, without the package starting an sshd on 0.0.0.0:22.
if [ ! -x /usr/sbin/sshd ] || ! command -v tcsh >/dev/null; then
  log "installing openssh-server and tcsh (their own start blocked)"
  touch /etc/ssh/sshd_not_to_be_run 2>/dev/null || { mkdir -p /etc/ssh; touch /etc/ssh/sshd_not_to_be_run; }
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; own_policy=1
  fi
  timeout 600 apt-get update -qq || die "apt-get update failed or timed out"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
    openssh-server tcsh >/dev/null
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
if ss -ltnH 'sport = :22' | grep -q .; then
  die "something listens on port 22 of this machine's namespace; this lab never starts one there"
fi
mkdir -p -m 0755 /run/sshd      # privilege separation (systemd's RuntimeDirectory= elsewhere)
mkdir -p "$ETC" "$LOGDIR" "$RUN" "$LAB/src"
chmod 0755 "$LAB" "$LAB/src"
for h in login bastion wrong; do
  [ -f "$ETC/$h" ] || ssh-keygen -q -t ed25519 -N '' -C "hpcfutures-ssh-lab-$h" -f "$ETC/$h"
done

# 2. accounts: the cluster's (tcsh) and the laptop's, each unable to read the other's home.
id "$CLUSTER_USER" >/dev/null 2>&1 || useradd -m -s /usr/bin/tcsh "$CLUSTER_USER"
id "$LAPTOP_USER" >/dev/null 2>&1 || useradd -m -s /bin/bash "$LAPTOP_USER"
# A password ('!', locked, makes sshd refuse even a key): the second factor of the :2224 sshd.
echo "$CLUSTER_USER:$LAB_PASSWORD" | chpasswd
chmod 0700 "/home/$CLUSTER_USER" "/home/$LAPTOP_USER"
install -d -m 0700 -o "$LAPTOP_USER" -g "$LAPTOP_USER" "/home/$LAPTOP_USER/.ssh"
[ -f "/home/$LAPTOP_USER/.ssh/id_ed25519" ] ||
  runuser -u "$LAPTOP_USER" -- ssh-keygen -q -t ed25519 -N '' -f "/home/$LAPTOP_USER/.ssh/id_ed25519"
install -d -m 0700 -o "$CLUSTER_USER" -g "$CLUSTER_USER" "/home/$CLUSTER_USER/.ssh"
install -m 0600 -o "$CLUSTER_USER" -g "$CLUSTER_USER" "/home/$LAPTOP_USER/.ssh/id_ed25519.pub" \
  "/home/$CLUSTER_USER/.ssh/authorized_keys"

# 3. one Python for both sides, outside /root (which neither user can enter): Debian's python3
#    and the project's dependencies; the tests put their copy of the code first on PYTHONPATH.
stamp=$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)
if [ "$(cat "$LAB/venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
  log "making $LAB/venv (python3 $(/usr/bin/python3 -c 'import sys; print(sys.version.split()[0])'))"
  rm -rf "$LAB/venv"
  /usr/bin/python3 -m venv "$LAB/venv"
  "$LAB/venv/bin/pip" install -q --disable-pip-version-check "$ROOT"
  echo "$stamp" >"$LAB/venv/.stamp"
fi
chmod -R a+rX "$LAB/venv"

# 4. networks: laptop <-> jump host <-> this machine; no default route, no forwarding.
[ -e /run/netns/hpcflap ] || ip netns add hpcflap
[ -e /run/netns/hpcfbast ] || ip netns add hpcfbast
if ! ip -n hpcflap link show eth0 >/dev/null 2>&1; then
  ip -n hpcfbast link del lapv 2>/dev/null || true
  ip link add hpcflapv type veth peer name eth0 netns hpcflap
  ip link set hpcflapv netns hpcfbast
  ip -n hpcfbast link set hpcflapv name lapv
fi
if ! ip link show hpcfbastl >/dev/null 2>&1; then
  ip -n hpcfbast link del up0 2>/dev/null || true
  ip link add hpcfbastl type veth peer name up0 netns hpcfbast
fi
ip -n hpcflap addr replace 10.88.1.2/30 dev eth0
ip -n hpcfbast addr replace 10.88.1.1/30 dev lapv
ip -n hpcfbast addr replace 10.88.2.2/30 dev up0
ip addr replace 10.88.2.1/30 dev hpcfbastl
for dev in "hpcflap eth0" "hpcflap lo" "hpcfbast lapv" "hpcfbast up0" "hpcfbast lo"; do
  set -- $dev; ip -n "$1" link set "$2" up
done
ip link set hpcfbastl up

# 5. the sshd's: the login node (forwarding on, :2222; off, :2223) and the jump host.
sshd_config() {  # NAME LISTEN HOSTKEY EXTRA...
  local name=$1 listen=$2 key=$3
  shift 3
  {
    echo "ListenAddress $listen"
    echo "HostKey $ETC/$key"
    echo "PidFile $RUN/$name.pid"
    # EXTRA first: sshd takes the first value it meets for an option
    printf '%s\n' "$@" "UsePAM no" "PubkeyAuthentication yes" "PasswordAuthentication no" \
      "KbdInteractiveAuthentication no" "AuthenticationMethods publickey" \
      "AllowUsers $CLUSTER_USER" "PermitRootLogin no" "X11Forwarding no" "LogLevel VERBOSE" \
      "SetEnv SLURM_CONF=$MN_CONF"
  } >"$ETC/$name.conf"
  /usr/sbin/sshd -t -f "$ETC/$name.conf" || die "sshd rejects $ETC/$name.conf"
}
sshd_config login 10.88.2.1:2222 login "AllowTcpForwarding yes"
sshd_config nofwd 10.88.2.1:2223 login "AllowTcpForwarding no"
sshd_config twofactor 10.88.2.1:2224 login "AllowTcpForwarding yes" \
  "PasswordAuthentication yes" "AuthenticationMethods publickey,password"
sshd_config bastion 10.88.1.1:22 bastion "AllowTcpForwarding yes" \
  "PermitOpen 10.88.2.1:2222 10.88.2.1:2223 10.88.2.1:2224"
for name in login nofwd twofactor bastion; do
  running "$RUN/$name.pid" sshd && continue
  log "starting sshd $name"
  if [ "$name" = bastion ]; then
    ip netns exec hpcfbast /usr/sbin/sshd -f "$ETC/$name.conf" -E "$LOGDIR/$name.log"
  else
    /usr/sbin/sshd -f "$ETC/$name.conf" -E "$LOGDIR/$name.log"
  fi
  wait_for 10 "sshd $name" running "$RUN/$name.pid" sshd
done

# 6. the laptop's ssh configuration and pinned host keys (a wrong one for one alias).
key() { cut -d' ' -f1,2 "$ETC/$1.pub"; }
cat >"/home/$LAPTOP_USER/.ssh/config" <<EOF
# (ssh takes the first value it meets: the particular hosts come before the shared block)
Host bastion
  HostName 10.88.1.1
  User $CLUSTER_USER
Host cluster-nofwd
  Port 2223
Host cluster-wrongkey
  UserKnownHostsFile ~/.ssh/known_hosts_wrong
Host cluster-2fa
  Port 2224
Host cluster-own
  ControlMaster auto
  ControlPath ~/.ssh/cm-%C
  ControlPersist 60
Host cluster cluster-nofwd cluster-wrongkey cluster-own cluster-2fa
  HostName 10.88.2.1
  Port 2222
  User $CLUSTER_USER
  ProxyJump bastion
  StrictHostKeyChecking yes
  ServerAliveInterval 15
EOF
{ echo "10.88.1.1 $(key bastion)"; echo "[10.88.2.1]:2222 $(key login)"
  echo "[10.88.2.1]:2223 $(key login)"; echo "[10.88.2.1]:2224 $(key login)"
} >"/home/$LAPTOP_USER/.ssh/known_hosts"
chmod 0644 "/home/$LAPTOP_USER/.ssh/known_hosts"
{ echo "10.88.1.1 $(key bastion)"; echo "[10.88.2.1]:2222 $(key wrong)"; } \
  >"/home/$LAPTOP_USER/.ssh/known_hosts_wrong"
chown -R "$LAPTOP_USER:$LAPTOP_USER" "/home/$LAPTOP_USER/.ssh"
chmod 0600 "/home/$LAPTOP_USER/.ssh/config"

# 7. the laptop helper: its netns and hostname, a private /tmp, the cluster's secrets hidden.
cat >"$LAB/laptop" <<EOF
#!/bin/sh
# Run a command as the lab's laptop (ci/ssh-lab-up.sh). PYTHONPATH comes from LAB_PYTHONPATH.
exec ip netns exec hpcflap unshare --uts --mount --propagation private sh -c '
  hostname laptop
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  for d in /home/$CLUSTER_USER /etc/hpcfutures-slurm-mn /etc/slurm /run/munge; do
    if [ -d "\$d" ]; then mount -t tmpfs -o mode=0755 tmpfs "\$d"; fi
  done
  exec setpriv --reuid=$LAPTOP_USER --regid=$LAPTOP_USER --init-groups \
    env -i HOME=/home/$LAPTOP_USER USER=$LAPTOP_USER LOGNAME=$LAPTOP_USER \
    PATH=$LAB/venv/bin:/usr/bin:/bin PYTHONPATH="\$LAB_PYTHONPATH" "\$@"' sh "\$@"
EOF
chmod 0755 "$LAB/laptop"

# 8. honesty checks: the laptop reaches the jump host only, and through it the login node.
if "$LAB/laptop" timeout 3 bash -c 'exec 3<>/dev/tcp/10.77.0.11/6918' 2>/dev/null; then
  die "the laptop can reach a compute node directly"
fi
if "$LAB/laptop" timeout 3 bash -c 'exec 3<>/dev/tcp/10.88.2.1/2222' 2>/dev/null; then
  die "the laptop can reach the login node without the jump host"
fi
if "$LAB/laptop" test -r "/home/$CLUSTER_USER/.ssh/authorized_keys"; then
  die "the laptop can read the cluster account's files"
fi
got=$("$LAB/laptop" ssh -o BatchMode=yes cluster 'echo $SLURM_CONF' 2>&1) ||
  die "the laptop cannot log in through the jump host: $got"
[ "$got" = "$MN_CONF" ] || die "the login node's sessions see SLURM_CONF='$got', not $MN_CONF"
log "ready in $((SECONDS - t0)) s: $LAB/laptop ssh cluster (via bastion) as $CLUSTER_USER"
