#!/usr/bin/env bash
# Context overflow as a user meets it with the bundled model and the CLI
# (README "Context limits"), on an agent whose KV budget holds 200 F16
# tokens (about four turns of a held-out line and a 16-token answer):
#   - ten turns of `baton generate --edge --session` never fail; the turns
#     that overflow drop earlier ones and say so in the stats table's
#     "context overflow" row and in --json's stats, the context never passes
#     200 tokens, and `baton sessions ls --json` counts the turns;
#   - `--context-overflow refuse` on the same session refuses the next turn
#     with the numbers (exit 1) and leaves the session as it was;
#   - `--context-overflow shift` drops turns without prefilling them again;
#   - a bad --context-overflow or --keep-tokens is a usage error (exit 2).
# usage: context_overflow_cli_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"

# Weights, scratch, the 64 MiB headroom floor and 200 F16 tokens of KV.
"${baton}" plan --model "${model}" --memory 1GiB --json > "${work}/plan.json" || fail "baton plan"
budget=$("${python}" - "${work}/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
per_token = next(c["kv_bytes_per_token"] for c in plan["codecs"] if c["codec"] == "f16")
print(plan["weights_bytes"] + plan["scratch_bytes"] + (64 << 20) + 200 * per_token)
EOF
)
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 1 --codec f16 --policy local \
  --memory-budget "${budget}"
edge="127.0.0.1:${server_port}"
"${baton}" health --edge "${edge}" --wait 60s > /dev/null || fail "edge not READY"

turn() {  # turn N [FLAGS...]: line N of the held-out text as the prompt of session "chat"
  local n=$1
  shift
  "${baton}" generate --edge "${edge}" --session chat -p "$(sed -n "${n}p" "${heldout}")" --max-tokens 16 \
    --temperature 0 --no-progress "$@"
}

overflowed=0
for n in $(seq 1 10); do
  turn "${n}" --json > "${work}/turn${n}.json" 2> "${work}/turn${n}.err" \
    || fail "turn ${n}: $(cat "${work}/turn${n}.err")"
  [[ $(json_get "${work}/turn${n}.json" 'd["stats"]["context_tokens"] <= 200') == True ]] \
    || fail "turn ${n} passed the budget: $(cat "${work}/turn${n}.json")"
  if [[ -n $(json_get "${work}/turn${n}.json" 'd["stats"].get("context_overflow", "")') ]]; then
    overflowed=$((overflowed + 1))
    json_get "${work}/turn${n}.json" 'd["stats"]["context_overflow"]' | grep -q "^context overflow: dropped turn" \
      || fail "turn ${n}: $(cat "${work}/turn${n}.json")"
  fi
done
[[ ${overflowed} -ge 3 ]] || fail "only ${overflowed} of 10 turns overflowed a budget of about four"

# The stats table names what was dropped.
turn 11 > /dev/null 2> "${work}/table.err" || fail "turn 11: $(cat "${work}/table.err")"
grep -q "context overflow *context overflow: dropped turn" "${work}/table.err" \
  || fail "no context overflow row: $(cat "${work}/table.err")"

"${baton}" sessions ls --edge "${edge}" --json > "${work}/ls.json" || fail "sessions ls"
"${python}" - "${work}/ls.json" <<'EOF' || fail "sessions ls: $(cat "${work}/ls.json")"
import json, sys
row = next(s for s in json.load(open(sys.argv[1]))["sessions"] if s["session_id"] == "chat")
assert row["turn_count"] == 11, row
assert row["dropped_turns"] >= 3 and row["first_held_turn"] == row["dropped_turns"] + 1, row
EOF

# Refuse: the numbers, exit 1, the session unchanged.
before=$(json_get "${work}/ls.json" '[s for s in d["sessions"] if s["session_id"] == "chat"][0]["token_count"]')
if turn 12 --context-overflow refuse > /dev/null 2> "${work}/refuse.err"; then
  fail "--context-overflow refuse answered a turn past the budget"
fi
grep -q "RESOURCE_EXHAUSTED.*this device fits 200 with codec f16" "${work}/refuse.err" \
  || fail "refusal without the numbers: $(cat "${work}/refuse.err")"
"${baton}" sessions ls --edge "${edge}" --json > "${work}/ls2.json" || fail "sessions ls"
after=$(json_get "${work}/ls2.json" '[s for s in d["sessions"] if s["session_id"] == "chat"][0]["token_count"]')
[[ "${before}" == "${after}" ]] || fail "the refused turn changed the session: ${before} -> ${after} tokens"

# Shift: turns dropped, the kept cells moved, only the prompt prefilled.
turn 12 --context-overflow shift --json > "${work}/shift.json" 2> "${work}/shift.err" \
  || fail "shift: $(cat "${work}/shift.err")"
json_get "${work}/shift.json" 'd["stats"].get("context_overflow", "")' | grep -q "(no recompute)" \
  || fail "shift did not shift: $(cat "${work}/shift.json")"

# Usage errors name the flag.
usage_error() {  # usage_error FLAG ARGS...: exit 2 naming FLAG
  local flag=$1 code=0
  shift
  turn 13 "$@" > /dev/null 2> "${work}/bad.err" || code=$?
  if [[ ${code} -ne 2 ]] || ! grep -q -- "${flag}" "${work}/bad.err"; then
    fail "bad ${flag}: exit ${code}: $(cat "${work}/bad.err")"
  fi
}
usage_error --context-overflow --context-overflow sideways
usage_error --keep-tokens --keep-tokens -1
echo "PASS: context overflow through the CLI (${overflowed} of 10 turns dropped earlier ones)"
