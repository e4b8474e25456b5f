#!/usr/bin/env bash
# Issue 16, "numbers that disagree": one truth per figure, one unit system,
# never a 0 for a figure not measured. With the bundled model:
#   - `model info`, `plan` and Health give the same KV bytes per token (int4:
#     codes + f16 scale and minimum per 32 values); sizes carry IEC units;
#   - `plan` on a large memory says once that the trained context limits every
#     codec, marks the agent's default codec and explains each codec name;
#   - Health names the model as the HTTP API does (GGUF general.name), the
#     architecture apart, and says "not measured yet" instead of 0;
#   - a local turn's stats have no cloud rows; its context tokens are what
#     `sessions ls` lists; a short follow-up under auto stays local;
#   - a turn the cloud served from its prefix cache reports the reused tokens;
#   - --json: 64-bit integers are numbers, digests hex;
#   - one pack's size is its file's in build, push and pull.
# usage: numbers_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"

# --- model info and plan ---------------------------------------------------
"${baton}" model info "${model}" --json > "${work}/info.json" || fail "model info --json"
"${baton}" model info "${model}" > "${work}/info.txt" || fail "model info"
"${baton}" plan --model "${model}" --memory 8GiB --json > "${work}/plan.json" || fail "plan --json"
"${baton}" plan --model "${model}" --memory 8GiB > "${work}/plan.txt" || fail "plan"
"${python}" - "${work}/info.json" "${work}/plan.json" <<'PY' || fail "model info vs plan: $(cat "${work}/info.json" "${work}/plan.json")"
import json, sys
info, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
stored = {c["stored_as"]: c["kv_bytes_per_token"] for c in plan["codecs"]}
assert info["kv_bytes_per_token_int4"] == stored["int4-g32"] == 480, (info["kv_bytes_per_token_int4"], stored)
assert info["kv_bytes_per_token_int8"] == stored["int8-g32"], stored
assert info["kv_bytes_per_token_f16"] == stored["f16"], stored
defaults = [c["codec"] for c in plan["codecs"] if c["agent_default"]]
assert defaults == ["int4-pc-kg128-g32-z3"], defaults
assert all(c["limited_by"] == "trained_context" for c in plan["codecs"]), plan["codecs"]
PY
grep -Eq '^  weights +3\.[0-9] MiB \([0-9]+ B\)$' "${work}/info.txt" || fail "model info: weights without a unit: $(cat "${work}/info.txt")"
grep -Eq '^  KV per token int4-g32 +480 B$' "${work}/info.txt" || fail "model info: int4 KV per token: $(cat "${work}/info.txt")"
(( $(grep -c '(trained context)' "${work}/plan.txt" || true) == 0 )) || fail "plan repeats the trained context per codec: $(cat "${work}/plan.txt")"
(( $(grep -c 'with every codec' "${work}/plan.txt") == 1 )) || fail "plan does not say once that the trained context limits every codec: $(cat "${work}/plan.txt")"
grep -q '^  int4-pc-kg128-g32-z3 \*' "${work}/plan.txt" || fail "plan does not mark the default codec: $(cat "${work}/plan.txt")"
grep -q "the agent's default codec" "${work}/plan.txt" || fail "plan lacks the default codec's legend"
for meaning in "K and V 8-bit, f16 scale per 32 values" "keys 4-bit, f16 scale + minimum per 128 tokens of one channel"; do
  grep -q "${meaning}" "${work}/plan.txt" || fail "plan does not explain the codec names ('${meaning}'): $(cat "${work}/plan.txt")"
done

# --- servers ---------------------------------------------------------------
start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${cloud_model}" --listen 127.0.0.1:0 --threads 1
cloud="127.0.0.1:${server_port}"
mkdir -p "${work}/sessions" "${work}/packs"
start_server edge '.*HTTP API on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --http 127.0.0.1:0 --cloud "${cloud}" --threads 1 \
  --sessions "${work}/sessions" --packs "${work}/packs"
http="127.0.0.1:${server_port}"
edge=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "${work}/edge.log" | head -1)
[[ -n "${edge}" ]] || fail "no gRPC address in the edge's log"
"${baton}" health --cloud "${cloud}" --wait 60s > /dev/null || fail "cloud not READY"
"${baton}" health --edge "${edge}" --wait 60s > "${work}/health.txt" || fail "edge not READY"

# Health before any turn: names, units, nothing shown as a measured 0.
grep -Eq '^  model +baton-tiny-kjv \(Q4_0, fingerprint [0-9a-f]{16}\)$' "${work}/health.txt" ||
  fail "Health model name: $(cat "${work}/health.txt")"
grep -Eq '^  architecture +llama$' "${work}/health.txt" || fail "Health architecture: $(cat "${work}/health.txt")"
grep -Eq '^  decode +not measured yet$' "${work}/health.txt" || fail "Health decode before any turn: $(cat "${work}/health.txt")"
! grep -Eq ' 0(\.0)? (tok/s|B/s)$' "${work}/health.txt" || fail "Health shows an unmeasured 0: $(cat "${work}/health.txt")"
grep -Eq 'max context int4-g32 \(default\) +1024 tokens \(480 B/token\)' "${work}/health.txt" ||
  fail "Health int4 bytes per token: $(cat "${work}/health.txt")"
curl -sf "http://${http}/v1/models" -o "${work}/models.json" || fail "GET /v1/models"
[[ $(json_get "${work}/models.json" 'd["data"][0]["id"]') == baton-tiny-kjv ]] ||
  fail "HTTP model id $(cat "${work}/models.json"), Health says baton-tiny-kjv"
"${baton}" health --edge "${edge}" --json > "${work}/health.json"
"${python}" - "${work}/health.json" <<'PY' || fail "health --json: $(cat "${work}/health.json")"
import json, re, sys
h = json.load(open(sys.argv[1]))
assert isinstance(h["cloud"]["checked_unix_ms"], int), h["cloud"]["checked_unix_ms"]
assert isinstance(h["memory"]["kv_budget_bytes"], int), h["memory"]["kv_budget_bytes"]
assert re.fullmatch(r"[0-9a-f]{64}", h["model"]["digest"]), h["model"]["digest"]
PY

# --- turns -----------------------------------------------------------------
head -c 1200 "${heldout}" > "${work}/prompt.txt"
"${baton}" generate --edge "${edge}" -p "And God said" --session local1 --policy local --max-tokens 6 \
  > /dev/null 2> "${work}/local.err" || fail "local turn: $(cat "${work}/local.err")"
grep -q "prefill place *local" "${work}/local.err" || fail "local turn: $(cat "${work}/local.err")"
for row in "cloud prefill" "KV transfer" "KV ingest" "KV on the wire" "cloud cache"; do
  ! grep -q "${row}" "${work}/local.err" || fail "a local turn shows the cloud row '${row}': $(cat "${work}/local.err")"
done
context=$(sed -n 's/^  context tokens *\([0-9]*\)$/\1/p' "${work}/local.err")
"${baton}" sessions ls --edge "${edge}" --json > "${work}/sessions.json"
"${python}" - "${work}/sessions.json" "${context}" <<'PY' || fail "sessions ls vs stats: $(cat "${work}/sessions.json") vs ${context}"
import json, sys
sessions = {s["session_id"]: s for s in json.load(open(sys.argv[1]))["sessions"]}
s = sessions["local1"]
assert s["token_count"] == int(sys.argv[2]), (s["token_count"], sys.argv[2])
assert isinstance(s["kv_bytes"], int) and isinstance(s["created_unix_ms"], int), s
PY

# The cloud's prefix cache: the same prompt in two sessions; the second turn
# is served from the cache, and says so.
for session in cached1 cached2; do
  "${baton}" generate --edge "${edge}" --prompt-file "${work}/prompt.txt" --session "${session}" --policy cloud \
    --max-tokens 2 --json > "${work}/${session}.json" 2> "${work}/${session}.err" ||
    fail "cloud turn ${session}: $(cat "${work}/${session}.err")"
done
[[ $(json_get "${work}/cached1.json" 'd["stats"]["cloud_reused_tokens"]') == 0 ]] || fail "a cold cloud reused tokens"
reused=$(json_get "${work}/cached2.json" 'd["stats"]["cloud_reused_tokens"]')
(( reused >= 64 )) || fail "the cloud's prefix-cache hit reports ${reused} reused tokens: $(cat "${work}/cached2.json")"
[[ $(json_get "${work}/cached2.json" 'type(d["stats"]["kv_wire_bytes"]).__name__') == int ]] ||
  fail "--json prints kv_wire_bytes as a string"

# A 3-token follow-up under auto stays local (the cloud call's fixed cost).
"${baton}" generate --edge "${edge}" -p "And he said" --session cached1 --max-tokens 2 --json \
  > "${work}/follow.json" 2> "${work}/follow.err" || fail "follow-up: $(cat "${work}/follow.err")"
[[ $(json_get "${work}/follow.json" 'd["stats"]["plan"]["place"]') == PREFILL_PLACE_LOCAL ]] ||
  fail "a short follow-up went to the cloud: $(json_get "${work}/follow.json" 'd["stats"]["plan"]["reason"]')"

# --- one pack, one size ------------------------------------------------------
"${baton}" pack build --cloud "${cloud}" --prompt-file "${work}/prompt.txt" --id sys --out "${work}/sys.batonkv" \
  > "${work}/build.txt" || fail "pack build"
"${baton}" pack push --cloud "${cloud}" "${work}/sys.batonkv" > "${work}/push.txt" || fail "pack push"
"${baton}" pack pull --edge "${edge}" sys > "${work}/pull.txt" || fail "pack pull"
file_size() { sed -n 's/.* file \([0-9.]* [KMG]*i*B\).*/\1/p' "$1"; }
size=$(file_size "${work}/build.txt")
[[ -n "${size}" ]] || fail "pack build does not name the file's size: $(cat "${work}/build.txt")"
[[ $(file_size "${work}/push.txt") == "${size}" ]] || fail "pack push: $(cat "${work}/push.txt") vs build ${size}"
[[ $(file_size "${work}/pull.txt") == "${size}" ]] || fail "pack pull: $(cat "${work}/pull.txt") vs build ${size}"
echo "PASS"
