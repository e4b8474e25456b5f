#!/usr/bin/env bash
# Changes a running link of wan-up.sh in both directions, at once, without
# touching connections: a bandwidth collapse (or recovery) or a change of
# packet loss mid-stream.
#
#   sudo deploy/wan/wan-set.sh --rate 64kbit          # collapse
#   sudo deploy/wan/wan-set.sh --rate 100mbit --loss 5
#   sudo deploy/wan/wan-set.sh --loss 0
#   sudo deploy/wan/wan-set.sh --show                 # qdiscs and drop counters
#
# Environment: BATON_WAN_PREFIX as for wan-up.sh. Exit codes: 0 done, 1 error,
# 2 usage, 77 not possible here.
set -euo pipefail
# shellcheck source=wan-lib.sh
source "$(dirname "$0")/wan-lib.sh"

rate=""
loss=""
show=0
while (( $# > 0 )); do
  case "$1" in
    --rate) [[ $# -ge 2 ]] || { echo "wan-set.sh: --rate needs a tc rate (e.g. 64kbit)" >&2; exit 2; }; rate=$2; shift 2 ;;
    --loss) [[ $# -ge 2 ]] || { echo "wan-set.sh: --loss needs a percentage" >&2; exit 2; }; loss=$2; shift 2 ;;
    --show) show=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "wan-set.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "${rate}${loss}" || ${show} -eq 1 ]] || { echo "wan-set.sh: give --rate, --loss or --show" >&2; exit 2; }
if [[ -n "${rate}" ]] && ! [[ "${rate}" =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]]; then
  echo "wan-set.sh: --rate '${rate}' is not a tc rate like 64kbit or 100mbit" >&2
  exit 2
fi
if [[ -n "${loss}" ]] && ! [[ "${loss}" =~ ^[0-9]+(\.[0-9]+)?$ && $(awk -v l="${loss}" 'BEGIN { print (l <= 100) }') == 1 ]]; then
  echo "wan-set.sh: --loss '${loss}' is not a percentage in [0, 100]" >&2
  exit 2
fi
[[ $(id -u) -eq 0 ]] || wan_skip "needs root"
wan_is_up || wan_die "no link ${wan_ns_cloud} is up; run wan-up.sh first"

for side in cloud edge; do
  if [[ ${side} == cloud ]]; then ns=${wan_ns_cloud}; dev=${wan_if_cloud}; else ns=${wan_ns_edge}; dev=${wan_if_edge}; fi
  netem=0
  [[ "$(ip netns exec "${ns}" tc qdisc show dev "${dev}")" == *"qdisc netem"* ]] && netem=1
  if [[ -n "${rate}" ]]; then
    read -r -a tbf <<< "$(wan_tbf_args "${rate}")"
    if (( netem )); then
      ip netns exec "${ns}" tc qdisc change dev "${dev}" parent 1:1 handle 10: tbf "${tbf[@]}"
    else
      ip netns exec "${ns}" tc qdisc change dev "${dev}" root handle 1: tbf "${tbf[@]}"
    fi
  fi
  if [[ -n "${loss}" ]]; then
    if (( netem )); then
      current=$(ip netns exec "${ns}" tc qdisc show dev "${dev}" | sed -n 's/.*qdisc netem 1: .* delay \([^ ]*\).*/\1/p')
      ip netns exec "${ns}" tc qdisc change dev "${dev}" root handle 1: netem delay "${current:-0ms}" loss "${loss}%"
    else
      wan_have_nft || wan_skip "--loss needs netem or nftables; neither works here"
      wan_nft_loss "${ns}" "${dev}" "${loss}"
    fi
  fi
  if (( show )); then
    echo "${side} (${ns}):"
    ip netns exec "${ns}" tc -s qdisc show dev "${dev}" | sed 's/^/  /'
    echo "  nftables drops: $(wan_nft_dropped "${ns}")"
  fi
done
[[ -z "${rate}${loss}" ]] || echo "wan-set.sh: ${rate:+rate ${rate} }${loss:+loss ${loss}% }each way"
