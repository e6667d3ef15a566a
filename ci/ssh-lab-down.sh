#!/usr/bin/env bash
# ssh-lab-down.sh -- undo ci/ssh-lab-up.sh's daemons and networks: its sshd's (only the pids in
# its pid files, never anything found by name), what still runs in its two namespaces (deleting
# a namespace does not end its processes), the laptop user's ssh masters, then the veths and
# namespaces. Users, keys, configs, logs and the venv stay, so the next up is quick.
set -euo pipefail
RUN=/run/hpcfutures-ssh-lab
LAPTOP_USER=hpcflaptop

LOG_TAG=ssh-lab-down
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "must be run as root"
stop_pidfiles sshd 5 "$RUN"/{login,nofwd,twofactor,bastion}.pid
for ns in hpcflap hpcfbast; do
  [ -e "/run/netns/$ns" ] || continue
  for pid in $(ip netns pids "$ns"); do kill -TERM "$pid" 2>/dev/null || true; done
done
if id "$LAPTOP_USER" >/dev/null 2>&1; then  # masters the laptop left (they run in its netns)
  for pid in $(pgrep -u "$LAPTOP_USER" -x ssh || true); do kill -TERM "$pid" 2>/dev/null || true; done
fi
ip link del hpcfbastl 2>/dev/null || true
for ns in hpcflap hpcfbast; do ip netns del "$ns" 2>/dev/null || true; done
log "down: sshd's stopped, namespaces hpcflap and hpcfbast removed"
