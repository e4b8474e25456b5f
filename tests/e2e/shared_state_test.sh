#!/usr/bin/env bash
# Issue 19, many cloud replicas and one memory, with real processes: a real
# redis-server on loopback, two baton-prefill replicas (A, B) pointed at it
# with --state, two tenants, and baton-edge agents in front of them.
#   - a prompt prefilled on A is, on B, a hit of the shared prefix cache (L2),
#     and the answer is the one a local prefill gives (split == local);
#   - tenant isolation across replicas: tenant 2 on B reuses nothing of
#     tenant 1's prompt, and cannot pull tenant 1's pack;
#   - a pack pushed to A: pulled from B byte for byte equal to the upload,
#     still there after B restarts, and a turn on B naming it reuses exactly
#     its tokens;
#   - a session's turn 1 on A, A killed, the agent restarted against B:
#     turn 2 reuses turn 1's KV (the session L2: exactly what turn 1 sent,
#     more than whole prefix blocks give);
#   - Redis killed: turns keep succeeding (misses), Health says the tier is
#     degraded, PutPrefix answers UNAVAILABLE; Redis restarted (same port,
#     its append-only file): hits resume;
#   - a value corrupted with redis-cli: a miss and the same answer.
# usage: shared_state_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
# Skips (exit 77) only when Redis is not installed, and never under
# BATON_REQUIRE_REDIS=1 (tests/run-all.sh, after installing it).
for tool in redis-server redis-cli; do
  command -v "${tool}" > /dev/null && continue
  [[ "${BATON_REQUIRE_REDIS:-0}" == 1 ]] && fail "${tool} not installed and BATON_REQUIRE_REDIS=1"
  skip "${tool} not installed (deploy/install-deps.sh --profile test installs redis-server and redis-tools)"
done
baton="${bin}/baton"

# --- Redis -----------------------------------------------------------------
redis_port=$("${python}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "${work}/redis"
start_redis() {
  # volatile-lru: cache keys (with a TTL) may be evicted, packs (none) never.
  redis-server --bind 127.0.0.1 --port "${redis_port}" --dir "${work}/redis" --appendonly yes --save "" \
    --maxmemory 256mb --maxmemory-policy volatile-lru > "${work}/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("${redis_pid}")
  for _ in $(seq 1 100); do
    [[ $(redis-cli -p "${redis_port}" ping 2> /dev/null) == PONG ]] && return 0
    kill -0 "${redis_pid}" 2> /dev/null || fail "redis-server exited: $(cat "${work}/redis.log")"
    sleep 0.1
  done
  fail "redis-server did not answer PING"
}
rcli() { redis-cli -p "${redis_port}" "$@"; }
start_redis
state="redis://127.0.0.1:${redis_port}"

# --- tenants -----------------------------------------------------------------
token1=tenant-one-token-0123456789abcdef
token2=tenant-two-token-0123456789abcdef
printf '%s one\n%s two\n' "${token1}" "${token2}" > "${work}/tokens"
chmod 600 "${work}/tokens"
printf '%s\n' "${token1}" > "${work}/token1"
printf '%s\n' "${token2}" > "${work}/token2"
chmod 600 "${work}/token1" "${work}/token2"

# --- replicas ----------------------------------------------------------------
# start_replica NAME [PORT]: sets ${NAME}_pid and ${NAME}_addr.
start_replica() {
  local name=$1 port=${2:-0}
  start_server "prefill-${name}" '.*listening on port \([0-9]*\).*' \
    "${bin}/baton-prefill" --model "${cloud_model}" --listen "127.0.0.1:${port}" --threads 1 \
    --auth-tokens "${work}/tokens" --state "${state}" --state-timeout 500ms
  printf -v "${name}_pid" '%s' "${server_pid}"
  printf -v "${name}_addr" '%s' "127.0.0.1:${server_port}"
  "${baton}" health --cloud "127.0.0.1:${server_port}" --wait 60s > /dev/null || fail "replica ${name} not READY"
}
start_replica a
start_replica b

# start_edge NAME CLOUD TOKEN_FILE: an agent with its own sessions and packs
# directories (kept across restarts); sets ${NAME}_pid and ${NAME}_addr.
start_edge() {
  local name=$1 cloud=$2 token=$3
  mkdir -p "${work}/${name}/sessions" "${work}/${name}/packs"
  start_server "edge-${name}" '.*listening on [^:]*:\([0-9]*\).*' \
    "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --cloud-token-file "${token}" \
    --threads 1 --sessions "${work}/${name}/sessions" --packs "${work}/${name}/packs"
  printf -v "${name}_pid" '%s' "${server_pid}"
  printf -v "${name}_addr" '%s' "127.0.0.1:${server_port}"
  "${baton}" health --edge "127.0.0.1:${server_port}" --wait 60s > /dev/null || fail "edge ${name} not READY"
}
# turn EDGE SESSION OUT [generate flags]: one greedy turn, --json to OUT.json.
turn() {
  local edge=$1 session=$2 out=$3
  shift 3
  "${baton}" generate --edge "${edge}" --session "${session}" --max-tokens 8 --temperature 0 --json "$@" \
    > "${work}/${out}.json" 2> "${work}/${out}.err" || fail "turn ${out}: $(cat "${work}/${out}.err")"
}
reused() { json_get "${work}/$1.json" 'd["stats"]["cloud_reused_tokens"]'; }
text() { json_get "${work}/$1.json" 'd["text"]'; }
prompt_tokens() { json_get "${work}/$1.json" 'd["stats"]["prompt_tokens"]'; }

# cut_text OFFSET LENGTH: bytes of the held-out text (no pipe: pipefail and SIGPIPE).
cut_text() { dd if="${heldout}" bs=1 skip="$1" count="$2" status=none; }
cut_text 0 1500 > "${work}/p1.txt"     # the shared prompt
cut_text 2000 1300 > "${work}/p2.txt"  # the session's turn 1
cut_text 4000 900 > "${work}/p3.txt"   # the pack's text
cut_text 6000 700 > "${work}/p4.txt"   # the session's turn 2
cut_text 8000 1200 > "${work}/p5.txt"  # prompts while Redis is down

start_edge ea "${a_addr}" "${work}/token1"
start_edge eb "${b_addr}" "${work}/token1"
start_edge eb2 "${b_addr}" "${work}/token2"

# --- the prefix cache's L2 -----------------------------------------------------
turn "${ea_addr}" s1 a1 --prompt-file "${work}/p1.txt" --policy cloud
[[ $(reused a1) == 0 ]] || fail "a cold replica reused $(reused a1) tokens"
turn "${ea_addr}" local1 local1 --prompt-file "${work}/p1.txt" --policy local
sleep 1  # the write-behind queue reaches Redis
# Tenant 2 first: nothing of tenant 1's KV, on either tier.
turn "${eb2_addr}" t2 t2 --prompt-file "${work}/p1.txt" --policy cloud
[[ $(reused t2) == 0 ]] || fail "tenant 2 on B reused $(reused t2) tokens of tenant 1's prompt"
turn "${eb_addr}" s1 b1 --prompt-file "${work}/p1.txt" --policy cloud
n=$(reused b1)
(( n >= 64 )) || fail "B did not reuse A's prefix through Redis: ${n} tokens reused"
[[ "$(text b1)" == "$(text local1)" ]] || fail "the L2 hit's answer differs from a local prefill: '$(text b1)' vs '$(text local1)'"
[[ "$(text a1)" == "$(text local1)" ]] || fail "the cold cloud answer differs from a local prefill"
echo "prefix L2: B reused ${n} of $(prompt_tokens b1) tokens computed on A"

# --- packs ---------------------------------------------------------------------
"${baton}" pack build --cloud "${a_addr}" --cloud-token-file "${work}/token1" --prompt-file "${work}/p3.txt" \
  --id sys --out "${work}/sys.batonkv" > /dev/null || fail "pack build"
"${baton}" pack push --cloud "${a_addr}" --cloud-token-file "${work}/token1" "${work}/sys.batonkv" > /dev/null ||
  fail "pack push to A"
stop_server "${b_pid}"
start_replica b "${b_addr##*:}"
# GetPrefix from the restarted B (its agent pulls): the pack as uploaded.
"${baton}" pack pull --edge "${eb_addr}" sys > /dev/null 2> "${work}/pull.err" ||
  fail "pack pull from a restarted B: $(cat "${work}/pull.err")"
pulled="${work}/eb/packs/sys.batonkv"
"${baton}" pack info "${work}/sys.batonkv" --json > "${work}/info-pushed.json"
"${baton}" pack info "${pulled}" --json --verify > "${work}/info-pulled.json" || fail "the pulled pack does not verify"
cmp -s "${work}/info-pushed.json" "${work}/info-pulled.json" ||
  fail "the pack pulled from B differs from the one pushed to A: $(diff "${work}/info-pushed.json" "${work}/info-pulled.json")"
if "${baton}" pack pull --edge "${eb2_addr}" sys > /dev/null 2> "${work}/pull-t2.err"; then
  fail "tenant 2 pulled tenant 1's pack from B"
fi
grep -qi "not.found" "${work}/pull-t2.err" || fail "tenant 2's pull of tenant 1's pack: $(cat "${work}/pull-t2.err")"
turn "${eb_addr}" withpack bp --pack sys -p " And it was so." --policy cloud
pack_tokens=$("${baton}" pack info "${work}/sys.batonkv" --json | "${python}" -c 'import json,sys; print(json.load(sys.stdin)["token_count"])')
[[ $(reused bp) == "${pack_tokens}" ]] || fail "a turn on B naming the pack reused $(reused bp) tokens, the pack has ${pack_tokens}"
echo "packs: pushed to A, pulled from a restarted B byte for byte, a turn on B reused its ${pack_tokens} tokens"

# --- the session cache's L2 ----------------------------------------------------------
turn "${ea_addr}" conv c1 --prompt-file "${work}/p2.txt" --policy cloud
turn1=$(prompt_tokens c1)
sleep 1
stop_server "${a_pid}" KILL
stop_server "${ea_pid}"
start_edge ea "${b_addr}" "${work}/token1"  # the same sessions directory, now in front of B
turn "${ea_addr}" conv c2 --prompt-file "${work}/p4.txt" --policy cloud
n=$(reused c2)
# The cloud prefilled turn 1's prompt but its last token (the agent computes
# that one for its logits): the session holds turn1 - 1 tokens, more than the
# whole 64-token blocks the prefix cache could give.
(( n == turn1 - 1 && n % 64 != 0 )) || fail "turn 2 on B reused ${n} tokens; turn 1 on A sent $((turn1 - 1)) (the session's L2)"
echo "sessions: turn 2 on B reused all ${n} tokens of turn 1 on A (killed)"

# --- Redis down, then back -------------------------------------------------------------
stop_server "${redis_pid}" KILL
turn "${eb_addr}" down1 d1 --prompt-file "${work}/p5.txt" --policy cloud
[[ $(reused d1) == 0 ]] || fail "with Redis down, a new prompt reused $(reused d1) tokens"
"${baton}" health --cloud "${b_addr}" > "${work}/health-down.txt" || fail "health while Redis is down"
grep -Eq 'state tier +redis, degraded' "${work}/health-down.txt" ||
  fail "Health does not say the tier is degraded: $(cat "${work}/health-down.txt")"
"${baton}" pack build --cloud "${b_addr}" --cloud-token-file "${work}/token1" --prompt-file "${work}/p5.txt" \
  --id sys2 --out "${work}/sys2.batonkv" > /dev/null || fail "pack build with Redis down"
if "${baton}" pack push --cloud "${b_addr}" --cloud-token-file "${work}/token1" "${work}/sys2.batonkv" \
  > /dev/null 2> "${work}/push-down.err"; then
  fail "PutPrefix succeeded with Redis down (a pack stored only locally)"
fi
grep -q UNAVAILABLE "${work}/push-down.err" || grep -qi unavailable "${work}/push-down.err" ||
  fail "PutPrefix with Redis down: $(cat "${work}/push-down.err")"
start_redis
sleep 6  # past the client's longest backoff
start_replica a
start_edge ea2 "${a_addr}" "${work}/token1"
turn "${ea2_addr}" again1 g1 --prompt-file "${work}/p1.txt" --policy cloud
(( $(reused g1) >= 64 )) || fail "after Redis came back, a fresh replica reused $(reused g1) tokens of a cached prompt"
"${baton}" health --cloud "${a_addr}" > "${work}/health-up.txt"
grep -Eq 'state tier +redis, healthy' "${work}/health-up.txt" || fail "Health after Redis came back: $(cat "${work}/health-up.txt")"
echo "Redis down: turns served, Health degraded, PutPrefix UNAVAILABLE; back: hits resume"

# --- a corrupted value ------------------------------------------------------------------
# Every stored prefix block of the shared prompt gets garbage of its own length.
mapfile -t keys < <(rcli --scan --pattern '*:pb:*')  # prefix blocks (cloud_prefill/state/state_tier.h)
(( ${#keys[@]} > 0 )) || fail "no prefix-cache keys in Redis: $(rcli --scan --pattern '*' | head)"
for key in "${keys[@]}"; do
  len=$(rcli strlen "${key}")
  head -c "${len}" /dev/urandom | rcli -x set "${key}" > /dev/null
done
stop_server "${a_pid}"
start_replica a "${a_addr##*:}"
turn "${ea2_addr}" corrupt1 x1 --prompt-file "${work}/p1.txt" --policy cloud
[[ $(reused x1) == 0 ]] || fail "corrupted blocks were reused ($(reused x1) tokens)"
[[ "$(text x1)" == "$(text local1)" ]] || fail "after corrupted values the answer differs from a local prefill"
echo "corrupted values: a miss, the same answer"
echo "PASS"
