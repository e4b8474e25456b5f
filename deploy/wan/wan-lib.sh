# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# Shared by wan-up.sh, wan-down.sh, wan-exec.sh (sourced, not run).
#
# Topology: two network namespaces, ${BATON_WAN_PREFIX}-cloud and
# ${BATON_WAN_PREFIX}-edge, joined by one veth pair; the cloud end is
# ${BATON_WAN_SUBNET}.1, the edge end ${BATON_WAN_SUBNET}.2 (/30). Several
# pairs can exist at once with different prefixes (the subnet only matters
# inside the namespaces).
BATON_WAN_PREFIX=${BATON_WAN_PREFIX:-baton}
BATON_WAN_SUBNET=${BATON_WAN_SUBNET:-10.77.0}
wan_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
wan_ns_cloud="${BATON_WAN_PREFIX}-cloud"
wan_ns_edge="${BATON_WAN_PREFIX}-edge"
wan_if_cloud="${BATON_WAN_PREFIX}-c"
wan_if_edge="${BATON_WAN_PREFIX}-e"
wan_ip_cloud="${BATON_WAN_SUBNET}.1"
wan_ip_edge="${BATON_WAN_SUBNET}.2"
# Exit code for "cannot run here" (the automake/ctest skip convention).
readonly WAN_SKIP=77

wan_die() { echo "$(basename "$0"): $*" >&2; exit 1; }
wan_skip() { echo "$(basename "$0"): SKIP: $*" >&2; exit "${WAN_SKIP}"; }

# Root, ip(8), tc(8), and a kernel that lets us create a namespace.
wan_check_capability() {
  (( ${#BATON_WAN_PREFIX} <= 12 )) || wan_die "BATON_WAN_PREFIX '${BATON_WAN_PREFIX}' is longer than 12 characters"
  [[ $(id -u) -eq 0 ]] || wan_skip "needs root (network namespaces and tc); run with sudo"
  command -v ip > /dev/null 2>&1 || wan_skip "ip (iproute2) is not installed"
  command -v tc > /dev/null 2>&1 || wan_skip "tc (iproute2) is not installed"
  local probe="${BATON_WAN_PREFIX}-probe$$"
  if ! ip netns add "${probe}" 2> /dev/null; then
    wan_skip "creating a network namespace is not permitted here (container without CAP_SYS_ADMIN?)"
  fi
  ip netns del "${probe}" 2> /dev/null || true
}

# True when the kernel has the netem qdisc (delay, loss); some container
# kernels lack sch_netem.
wan_have_netem() {
  local probe="${BATON_WAN_PREFIX}-nprobe$$"
  ip netns add "${probe}" 2> /dev/null || return 1
  ip -n "${probe}" link set lo up
  local ok=1
  ip netns exec "${probe}" tc qdisc add dev lo root netem delay 1ms 2> /dev/null && ok=0
  ip netns del "${probe}" 2> /dev/null || true
  return "${ok}"
}

# Reads PROFILE from the profiles file: sets wan_rate, wan_rtt_ms.
wan_read_profile() {
  local name=$1 line
  line=$(awk -v n="${name}" '$1 == n { print; exit }' "${wan_dir}/profiles")
  [[ -n "${line}" ]] || wan_die "unknown profile '${name}' (known: $(awk '!/^#/ && NF { printf "%s ", $1 }' "${wan_dir}/profiles"))"
  read -r _ wan_rate wan_rtt_ms _ <<< "${line}"
}

# True when namespace NS exists. The name must match whole (another prefix's
# namespace, e.g. a-baton-cloud, is not ours) and awk reads the whole listing:
# a `grep -q` that exits at the first match can kill the writer with SIGPIPE,
# which the callers' pipefail turns into "not found".
wan_ns_exists() { ip netns list 2> /dev/null | awk -v ns="$1" '$1 == ns { found = 1 } END { exit !found }'; }

wan_is_up() { wan_ns_exists "${wan_ns_cloud}"; }

# True when nftables can drop packets at random in a namespace (the loss of
# wan-up.sh --loss where the kernel lacks netem).
wan_have_nft() {
  command -v nft > /dev/null 2>&1 || return 1
  local probe="${BATON_WAN_PREFIX}-fprobe$$"
  ip netns add "${probe}" 2> /dev/null || return 1
  local ok=1
  ip netns exec "${probe}" nft -f - 2> /dev/null <<'NFT' && ok=0
table inet probe {
  chain out {
    type filter hook output priority 0; policy accept;
    numgen random mod 10000 < 1 drop
  }
}
NFT
  ip netns del "${probe}" 2> /dev/null || true
  return "${ok}"
}

# Random loss of PCT percent of the packets leaving namespace NS through
# device DEV (the link, not loopback), with nftables (table inet baton_wan,
# counter on the drop rule); PCT 0 removes it.
wan_nft_loss() {
  local ns=$1 dev=$2 pct=$3
  ip netns exec "${ns}" nft delete table inet baton_wan 2> /dev/null || true
  local per10k
  per10k=$(awk -v p="${pct}" 'BEGIN { printf "%d", p * 100 + 0.5 }')
  (( per10k > 0 )) || return 0
  local match="numgen random mod 10000 < ${per10k} "
  (( per10k < 10000 )) || match=""  # 100%: every packet
  ip netns exec "${ns}" nft -f - <<NFT
table inet baton_wan {
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "${dev}" ${match}counter drop
  }
}
NFT
}

# Packets dropped so far by wan_nft_loss in namespace NS (0 without the rule).
wan_nft_dropped() {
  ip netns exec "$1" nft list table inet baton_wan 2> /dev/null |
    awk '{ for (i = 1; i < NF; i++) if ($i == "packets") n = $(i + 1) } END { print n + 0 }' 
}

# A tc rate (1gbit, 100mbit, 64kbit) in bit/s.
wan_rate_bits() {
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1;
    printf "%d", n * m }'
}

# The tbf rate shaping of each direction (tbf at the root without netem,
# below netem's 1: with it): RATE in tc units.
wan_tbf_args() {  # wan_tbf_args RATE -> "rate R burst B latency 100ms"
  local rate_bits burst_bytes
  rate_bits=$(wan_rate_bits "$1")
  # At least one 10 ms slice of the rate (a 1 Gbit link needs more than the
  # 32 KiB a slow one does).
  burst_bytes=$(( rate_bits / 8 / 100 ))
  (( burst_bytes >= 32768 )) || burst_bytes=32768
  echo "rate $1 burst ${burst_bytes} latency 100ms"
}
