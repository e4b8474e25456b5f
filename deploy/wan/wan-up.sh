#!/usr/bin/env bash
# Emulates a WAN link between a cloud and an edge on this machine: two
# network namespaces joined by a veth pair shaped with tc (netem for delay and
# loss, tbf for the rate), one profile from deploy/wan/profiles. Where the
# kernel lacks netem, loss comes from nftables (a random drop rule in each
# namespace) and delay is not emulated. deploy/wan/wan-set.sh changes the
# rate or the loss of a running link (a bandwidth collapse mid-stream).
#
#   sudo deploy/wan/wan-up.sh wifi [--loss 1]
#   sudo deploy/wan/wan-exec.sh cloud build/bin/baton-prefill --listen 10.77.0.1:50051 ... &
#   sudo deploy/wan/wan-exec.sh edge  build/bin/baton-edge --cloud 10.77.0.1:50051 --cloud-plaintext ... &
#   sudo deploy/wan/wan-down.sh
#
# Options:
#   --loss PCT        random packet loss in each direction (netem, else
#                     nftables), e.g. 0.5
#   --allow-no-delay  where the kernel lacks netem: shape the rate only (tbf)
#                     instead of refusing; delay is then not emulated (loss
#                     comes from nftables)
#   --check           only check that this machine allows it (exit 0 or 77)
# Environment: BATON_WAN_PREFIX (names, default "baton"), BATON_WAN_SUBNET
# (default 10.77.0: cloud .1, edge .2).
# Exit codes: 0 up, 1 error, 2 usage, 77 not possible here (no root, netns
# not permitted, no netem) with a SKIP line on stderr.
set -euo pipefail
# shellcheck source=wan-lib.sh
source "$(dirname "$0")/wan-lib.sh"

profile=""
loss=""
allow_no_delay=0
check_only=0
while (( $# > 0 )); do
  case "$1" in
    --loss) [[ $# -ge 2 ]] || { echo "wan-up.sh: --loss needs a percentage" >&2; exit 2; }; loss=$2; shift 2 ;;
    --loss=*) loss=${1#--loss=}; shift ;;
    --allow-no-delay) allow_no_delay=1; shift ;;
    --check) check_only=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "wan-up.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [[ -z "${profile}" ]] || { echo "wan-up.sh: one PROFILE only" >&2; exit 2; }; profile=$1; shift ;;
  esac
done
if [[ -n "${loss}" ]] && ! [[ "${loss}" =~ ^[0-9]+(\.[0-9]+)?$ && $(awk -v l="${loss}" 'BEGIN { print (l <= 100) }') == 1 ]]; then
  echo "wan-up.sh: --loss '${loss}' is not a percentage in [0, 100]" >&2
  exit 2
fi

wan_check_capability
have_netem=1
wan_have_netem || have_netem=0
have_nft=1
wan_have_nft || have_nft=0
if [[ -n "${loss}" ]] && (( have_netem == 0 && have_nft == 0 )); then
  wan_skip "--loss needs netem or nftables (nft with numgen); neither works here"
fi
if (( have_netem == 0 && allow_no_delay == 0 )); then
  wan_skip "the kernel has no netem qdisc (sch_netem): delay and loss cannot be emulated; --allow-no-delay shapes the rate only"
fi
if (( check_only )); then
  (( have_netem )) && echo "wan-up.sh: network namespaces, tc and netem are available" ||
    echo "wan-up.sh: network namespaces and tc are available; netem is not (rate only)"
  exit 0
fi
[[ -n "${profile}" ]] || { echo "wan-up.sh: give a PROFILE (see deploy/wan/profiles)" >&2; exit 2; }
wan_read_profile "${profile}"
wan_is_up && wan_die "already up (${wan_ns_cloud}); run wan-down.sh first"

cleanup_on_error() { ip netns del "${wan_ns_cloud}" 2> /dev/null || true; ip netns del "${wan_ns_edge}" 2> /dev/null || true; }
trap cleanup_on_error ERR

ip netns add "${wan_ns_cloud}"
ip netns add "${wan_ns_edge}"
ip link add "${wan_if_cloud}" type veth peer name "${wan_if_edge}"
ip link set "${wan_if_cloud}" netns "${wan_ns_cloud}"
ip link set "${wan_if_edge}" netns "${wan_ns_edge}"
ip -n "${wan_ns_cloud}" addr add "${wan_ip_cloud}/30" dev "${wan_if_cloud}"
ip -n "${wan_ns_edge}" addr add "${wan_ip_edge}/30" dev "${wan_if_edge}"
for ns in "${wan_ns_cloud}" "${wan_ns_edge}"; do ip -n "${ns}" link set lo up; done
# One MTU-sized packet per segment (no GSO super-packets): loss and rate then
# act per wire packet, as on a real link.
ip -n "${wan_ns_cloud}" link set "${wan_if_cloud}" gso_max_segs 1 2> /dev/null || true
ip -n "${wan_ns_edge}" link set "${wan_if_edge}" gso_max_segs 1 2> /dev/null || true
ip -n "${wan_ns_cloud}" link set "${wan_if_cloud}" up
ip -n "${wan_ns_edge}" link set "${wan_if_edge}" up

# Each direction: netem (half the RTT, loss) at the root, tbf (rate) below
# it; without netem, tbf alone and the loss from nftables.
read -r -a tbf <<< "$(wan_tbf_args "${wan_rate}")"
rate_bits=$(wan_rate_bits "${wan_rate}")
half_rtt=$(awk -v r="${wan_rtt_ms}" 'BEGIN { printf "%.3f", r / 2 }')
for side in cloud edge; do
  if [[ ${side} == cloud ]]; then ns=${wan_ns_cloud}; dev=${wan_if_cloud}; else ns=${wan_ns_edge}; dev=${wan_if_edge}; fi
  if (( have_netem )); then
    netem=(delay "${half_rtt}ms")
    if [[ -n "${loss}" ]]; then netem+=(loss "${loss}%"); fi
    # The netem queue must hold a full RTT of packets at the link rate.
    limit=$(awk -v b="${rate_bits}" -v r="${wan_rtt_ms}" 'BEGIN { l = b / 8 / 1500 * r / 1000 * 2; printf "%d", (l < 1000 ? 1000 : l) }')
    ip netns exec "${ns}" tc qdisc add dev "${dev}" root handle 1: netem "${netem[@]}" limit "${limit}"
    ip netns exec "${ns}" tc qdisc add dev "${dev}" parent 1:1 handle 10: tbf "${tbf[@]}"
  else
    ip netns exec "${ns}" tc qdisc add dev "${dev}" root handle 1: tbf "${tbf[@]}"
    if [[ -n "${loss}" ]]; then wan_nft_loss "${ns}" "${dev}" "${loss}"; fi
  fi
done
trap - ERR

echo "wan-up.sh: profile ${profile}: ${wan_rate} each way, RTT ${wan_rtt_ms} ms${loss:+, loss ${loss}%}"
if (( ! have_netem )); then
  echo "wan-up.sh: WARNING: no netem in this kernel: RTT is NOT emulated${loss:+ (loss from nftables)}"
fi
echo "  cloud: namespace ${wan_ns_cloud}, address ${wan_ip_cloud}"
echo "  edge:  namespace ${wan_ns_edge}, address ${wan_ip_edge}"
echo "  run:   $(dirname "$0")/wan-exec.sh cloud|edge COMMAND..."
