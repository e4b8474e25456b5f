#!/usr/bin/env bash
# Runs a command inside the cloud or edge namespace of wan-up.sh:
#   deploy/wan/wan-exec.sh cloud|edge COMMAND [ARGS...]
# Environment: BATON_WAN_PREFIX as for wan-up.sh.
set -euo pipefail
# shellcheck source=wan-lib.sh
source "$(dirname "$0")/wan-lib.sh"
if (( $# < 2 )) || [[ "$1" != cloud && "$1" != edge ]]; then
  echo "usage: wan-exec.sh cloud|edge COMMAND [ARGS...]" >&2
  exit 2
fi
[[ $(id -u) -eq 0 ]] || wan_skip "needs root"
ns=${wan_ns_cloud}
[[ "$1" == edge ]] && ns=${wan_ns_edge}
shift
wan_ns_exists "${ns}" || wan_die "namespace ${ns} does not exist; run wan-up.sh first"
exec ip netns exec "${ns}" "$@"
