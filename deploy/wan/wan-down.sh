#!/usr/bin/env bash
# Removes the emulated WAN of wan-up.sh (both namespaces; the veth pair goes
# with them; processes still inside lose their network). Idempotent.
# Environment: BATON_WAN_PREFIX as for wan-up.sh.
set -euo pipefail
# shellcheck source=wan-lib.sh
source "$(dirname "$0")/wan-lib.sh"
[[ $(id -u) -eq 0 ]] || wan_skip "needs root"
removed=0
for ns in "${wan_ns_cloud}" "${wan_ns_edge}"; do
  if wan_ns_exists "${ns}"; then
    # Processes left in the namespace would keep its veth end alive.
    for pid in $(ip netns pids "${ns}" 2> /dev/null); do kill "${pid}" 2> /dev/null || true; done
    ip netns del "${ns}"
    removed=$((removed + 1))
  fi
done
echo "wan-down.sh: removed ${removed} namespace(s) (${wan_ns_cloud}, ${wan_ns_edge})"
