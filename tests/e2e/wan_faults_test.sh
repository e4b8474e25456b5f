#!/usr/bin/env bash
# Network faults between real processes: baton-prefill in the cloud
# namespace and baton-edge in the edge namespace of deploy/wan (veth + tc
# rate shaping; loss from netem, else nftables), sessions through the CLI.
#   1. 5% packet loss each way: a cloud prefill and a cloud follow-up turn
#      complete and give the same tokens as local prefill; packets were
#      really dropped (the drop counters).
#   2. Bandwidth collapse mid-stream under policy cloud: once a quarter of
#      the KV has crossed, the rate drops ~100x; the turn ends with
#      DEADLINE_EXCEEDED (--cloud-stall-timeout or --cloud-timeout, whichever
#      comes first), the session keeps its last complete turn, and the next
#      turn works.
#   3. The same collapse under policy auto: the edge abandons the stream
#      (its projected rest exceeds local prefill) and completes the turn
#      locally with the reason; tokens equal the local reference.
#   4. Cloud host lost mid-stream: the cloud's packets stop (100% loss) and
#      its process is killed (kill -9) -- a dead host sends no RST; the edge
#      ends the silent stream at --cloud-stall-timeout with DEADLINE_EXCEEDED,
#      the session unchanged; auto then prefills locally. (A process crash on
#      a live host is the integration test CloudKilledMidStream: there the
#      kernel's reset ends the stream at once.)
# Skips (exit 77, "SKIP: ...": ctest shows it skipped) without root, network
# namespaces, or a way to drop packets (netem or nftables).
# usage: wan_faults_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
wan="${src}/deploy/wan"
baton="${bin}/baton"
export BATON_WAN_PREFIX="bwf$$"
export BATON_WAN_SUBNET=10.81.0
cloud_ip="${BATON_WAN_SUBNET}.1"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cleanup_signal=KILL
cleanup_hook() { "${wan}/wan-down.sh" > /dev/null 2>&1 || true; }
bundled_models

set +e
check=$("${wan}/wan-up.sh" --check --allow-no-delay 2>&1); rc=$?
set -e
(( rc != 77 )) || skip "wan faults test: ${check//SKIP: /}"
[[ ${rc} -eq 0 ]] || fail "wan-up.sh --check: ${check}"
set +e
up=$("${wan}/wan-up.sh" wifi --allow-no-delay --loss 5 2>&1); rc=$?
set -e
(( rc != 77 )) || skip "wan faults test: ${up//SKIP: /}"
[[ ${rc} -eq 0 ]] || fail "wan-up.sh: ${up}"
in_ns() { "${wan}/wan-exec.sh" "$@"; }

# The servers start through wan-exec.sh itself, not the in_ns function: wan-exec.sh
# and `ip netns exec` exec the program, so the pid recorded is the server's own
# (a function in the background would leave a subshell's pid, and kill -9 of it
# would orphan the server).
# start_cloud: baton-prefill in the cloud namespace; sets cloud_port, cloud_pid.
start_cloud() {
  start_server baton-prefill '.*listening on port \([0-9]*\).*' \
    "${wan}/wan-exec.sh" cloud "${bin}/baton-prefill" --model "${model}" --listen "${cloud_ip}:0" --threads 1
  cloud_port=${server_port}
  cloud_pid=${server_pid}
}
start_cloud
# Sanitized builds (tests/run-sanitized.sh sets BATON_SANITIZER) run several
# times slower: a whole cloud turn over the lossy link needs longer.
# In step 4 the stall timeout must end the silent stream before the turn's
# whole deadline does: the stream reaches its quarter after the cloud's
# prefill, which took ~2.5 s on a loaded 2-core CI machine (8 s against a
# 6 s stall timeout failed there), so the two are 12 s and 4 s.
cloud_timeout=12s
stall_timeout=4s
local_tps=100
# A sanitized cloud prefills ~10x slower (its Health says so, and the split
# policy believes it): the assumed local speed drops with it, so auto still
# prefers the cloud in step 3.
[[ -z "${BATON_SANITIZER:-}" ]] || { cloud_timeout=40s; stall_timeout=6s; local_tps=20; }
# The edge assumes local prefill at ${local_tps} tok/s (the tiny model is far
# faster here): then auto prefers a cloud on this link, and abandoning a
# collapsed stream is measured against a local estimate of about 6 s (30 s
# under a sanitizer).
start_server baton-edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${wan}/wan-exec.sh" edge "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 \
  --cloud "${cloud_ip}:${cloud_port}" --cloud-plaintext --threads 1 --codec f16 --cloud-timeout "${cloud_timeout}" \
  --cloud-stall-timeout "${stall_timeout}" --local-prefill-tps "${local_tps}"
edge="127.0.0.1:${server_port}"
in_ns edge "${baton}" health --edge "${edge}" --wait 60s > /dev/null || fail "edge agent not READY"
wait_cloud_ready() {
  for _ in $(seq 1 100); do
    in_ns edge "${baton}" health --edge "${edge}" --json > "${work}/health.json" 2> /dev/null || true
    grep -q '"cloud_reachable": *true\|"reachable": *true' "${work}/health.json" && return 0
    sleep 0.1
  done
  fail "the edge never saw the cloud: $(cat "${work}/health.json")"
}
wait_cloud_ready

head -c 2400 "${heldout}" > "${work}/prompt.txt"
echo "And the LORD spake unto Moses, saying" > "${work}/followup.txt"
# gen NAME ARGS...: one turn through the CLI in the edge namespace; JSON to
# NAME.json, stderr to NAME.err; returns the CLI's exit code.
gen() {
  local name=$1
  shift
  in_ns edge "${baton}" generate --edge "${edge}" --max-tokens 16 --temperature 0 --json --timeout 120s "$@" \
    > "${work}/${name}.json" 2> "${work}/${name}.err"
}
tokens_of() { json_get "${work}/$1.json" 'd["token_ids"]'; }
session_tokens() {  # session_tokens ID -> token count, or "none"
  in_ns edge "${baton}" sessions ls --edge "${edge}" --json > "${work}/sessions.json"
  json_get "${work}/sessions.json" \
    "next((s.get('token_count', 0) for s in d.get('sessions', []) if s['session_id'] == '$1'), 'none')"
}
cloud_sent_bytes() {  # bytes the cloud end has sent so far
  in_ns cloud tc -s qdisc show dev "${BATON_WAN_PREFIX}-c" | awk '/Sent/ { print $2; exit }'
}

# The local reference: two turns.
gen ref1 --session ref --policy local --prompt-file "${work}/prompt.txt" || fail "local turn 1: $(cat "${work}/ref1.err")"
gen ref2 --session ref --policy local --prompt-file "${work}/followup.txt" || fail "local turn 2: $(cat "${work}/ref2.err")"

# --- 1. 5% loss each way ----------------------------------------------------------
gen lossy1 --session lossy --policy cloud --prompt-file "${work}/prompt.txt" ||
  fail "cloud turn under 5% loss: $(cat "${work}/lossy1.err")"
gen lossy2 --session lossy --policy cloud --prompt-file "${work}/followup.txt" ||
  fail "cloud follow-up under 5% loss: $(cat "${work}/lossy2.err")"
[[ $(json_get "${work}/lossy1.json" 'd["stats"]["plan"]["place"]') == PREFILL_PLACE_CLOUD ]] || fail "lossy: not the cloud"
wire=$(json_get "${work}/lossy1.json" 'int(d["stats"]["kv_wire_bytes"])')
(( wire > 0 )) || fail "lossy: no KV on the wire"
[[ "$(tokens_of lossy1)" == "$(tokens_of ref1)" ]] || fail "5% loss: turn 1 tokens differ from local"
[[ "$(tokens_of lossy2)" == "$(tokens_of ref2)" ]] || fail "5% loss: turn 2 tokens differ from local"
[[ "$(session_tokens lossy)" == "$(session_tokens ref)" ]] || fail "5% loss: session lengths differ"
# (Output captured whole, not piped into grep -q: see wan_netns_test.sh.)
if [[ "$("${wan}/wan-exec.sh" cloud tc qdisc show dev "${BATON_WAN_PREFIX}-c")" == *"loss 5%"* ]]; then
  echo "5% loss (netem): 2 cloud turns exact, ${wire} KV bytes on the wire"
else
  dropped=0
  for side in cloud edge; do
    n=$(bash -c "source '${wan}/wan-lib.sh'; wan_nft_dropped \"\${wan_ns_${side}}\"")
    dropped=$(( dropped + n ))
  done
  (( dropped > 0 )) || fail "5% loss: nftables dropped no packet"
  echo "5% loss (nftables, ${dropped} packets dropped): 2 cloud turns exact, ${wire} KV bytes on the wire"
fi
"${wan}/wan-set.sh" --loss 0 > /dev/null

# --- 2./3. bandwidth collapse mid-stream ------------------------------------------
# The base rate makes the stream take about 4 s; the collapse leaves the rest
# about a minute (blocks still arrive every few seconds: the pace, not the
# stall timeout, is what gives up under auto).
base_kbit=$(( wire * 8 / 4 / 1000 ))
(( base_kbit >= 16 )) || base_kbit=16
collapse_kbit=$(( wire * 8 * 3 / 4 / 60 / 1000 ))
(( collapse_kbit >= 8 )) || collapse_kbit=8
(( collapse_kbit * 8 <= base_kbit )) || fail "the KV stream (${wire} bytes) is too small for a collapse test"
# at_quarter START COMMAND...: waits (up to ~10 s) until a quarter of the KV
# crossed the link since the cloud end had sent START bytes, then runs
# COMMAND; false if the stream never got that far.
at_quarter() {
  local start=$1
  shift
  for _ in $(seq 1 1000); do
    if (( $(cloud_sent_bytes) - start > wire / 4 )); then
      "$@"
      return 0
    fi
    sleep 0.01
  done
  return 1
}
collapse() { "${wan}/wan-set.sh" --rate "${collapse_kbit}kbit" > /dev/null; }
restore_link() { "${wan}/wan-set.sh" --rate 100mbit > /dev/null; }

for policy in cloud auto; do
  session="collapse-${policy}"
  wait_cloud_ready  # Health polls may have failed while the link was down
  gen "${session}-1" --session "${session}" --policy local -p "In the beginning" ||
    fail "collapse: first local turn: $(cat "${work}/${session}-1.err")"
  before=$(session_tokens "${session}")
  "${wan}/wan-set.sh" --rate "${base_kbit}kbit" > /dev/null
  start=$(cloud_sent_bytes)
  set +e
  gen "${session}-2" --session "${session}" --policy "${policy}" --prompt-file "${work}/prompt.txt" &
  call=$!
  at_quarter "${start}" collapse; collapsed=$?
  wait "${call}"; rc=$?
  set -e
  restore_link
  (( collapsed == 0 )) ||
    fail "${policy}: the stream never reached a quarter of the KV: $(cat "${work}/${session}-2.json" "${work}/${session}-2.err")"
  if [[ ${policy} == cloud ]]; then
    (( rc != 0 )) || fail "collapse under policy cloud: the turn succeeded over a collapsed link?"
    grep -qiE "deadline|sent nothing" "${work}/${session}-2.err" || fail "collapse under cloud: $(cat "${work}/${session}-2.err")"
    [[ "$(session_tokens "${session}")" == "${before}" ]] || fail "collapse under cloud: the session changed"
    echo "collapse under cloud: $(head -c 300 "${work}/${session}-2.err" | tr '\n' ' ')"
    gen "${session}-3" --session "${session}" --policy local --prompt-file "${work}/followup.txt" ||
      fail "the turn after the collapse: $(cat "${work}/${session}-3.err")"
  else
    (( rc == 0 )) || fail "collapse under auto: $(cat "${work}/${session}-2.err")"
    reason=$(json_get "${work}/${session}-2.json" 'd["stats"].get("fallback_reason", "")')
    # The pace projection ("too slow") or, when no block arrives for the
    # stall timeout after the collapse, the stall ("sent nothing"): either
    # way the turn completes locally.
    [[ "${reason}" == *"too slow"* || "${reason}" == *"sent nothing"* ]] ||
      fail "collapse under auto: fallback reason '${reason}'; plan: \
$(json_get "${work}/${session}-2.json" 'd["stats"]["plan"]')"
    echo "collapse under auto: completed locally: ${reason}"
    # Same conversation locally from scratch: same tokens.
    gen collapse-ref1 --session collapse-ref --policy local -p "In the beginning" > /dev/null || fail "collapse ref 1"
    gen collapse-ref2 --session collapse-ref --policy local --prompt-file "${work}/prompt.txt" || fail "collapse ref 2"
    [[ "$(tokens_of "${session}-2")" == "$(tokens_of collapse-ref2)" ]] || fail "collapse under auto: tokens differ"
  fi
done

# --- 4. cloud host lost mid-stream ---------------------------------------------------
gen lost-1 --session lost --policy local -p "In the beginning" || fail "lost: first turn"
before=$(session_tokens lost)
"${wan}/wan-set.sh" --rate "${base_kbit}kbit" > /dev/null
start=$(cloud_sent_bytes)
set +e
gen lost-2 --session lost --policy cloud --prompt-file "${work}/prompt.txt" &
call=$!
lose_host() { "${wan}/wan-set.sh" --loss 100 > /dev/null; kill -9 "${cloud_pid}"; }
at_quarter "${start}" lose_host; lost=$?
wait "${call}"; rc=$?
set -e
(( lost == 0 )) || fail "lost: the stream never reached a quarter of the KV"
(( rc != 0 )) || fail "lost: the turn succeeded without its cloud: $(cat "${work}/lost-2.json")"
grep -q "sent nothing" "${work}/lost-2.err" || fail "lost: $(cat "${work}/lost-2.err")"
[[ "$(session_tokens lost)" == "${before}" ]] || fail "lost: the session changed"
echo "cloud host lost mid-stream: $(head -c 300 "${work}/lost-2.err" | tr '\n' ' ')"
gen lost-3 --session lost --policy auto --prompt-file "${work}/prompt.txt" || fail "lost: auto after: $(cat "${work}/lost-3.err")"
[[ $(json_get "${work}/lost-3.json" 'd["stats"]["plan"]["place"]') == PREFILL_PLACE_LOCAL ]] ||
  [[ -n $(json_get "${work}/lost-3.json" 'd["stats"].get("fallback_reason", "")') ]] || fail "lost: auto did not go local"
[[ "$(tokens_of lost-3)" == "$(tokens_of collapse-ref2)" ]] || fail "lost: tokens after the cloud died differ"
echo "wan faults: ok"
