#!/usr/bin/env bash
# Context limits and Ctrl-C, as a user meets them with the bundled model
# (trained context 1024 tokens):
#   - the README walkthrough's example prompts (deploy/examples) fit: a
#     first turn with --max-tokens 64 and a follow-up with the default;
#   - a prompt past the trained context is refused naming it, by the agent
#     (`baton generate --edge`) and by `baton generate --model` alike (exit 1);
#   - prompt + --max-tokens past it: a warning before the text, clamped;
#   - SIGINT to `baton generate --edge` mid-answer: the line ends, the stats
#     marked interrupted follow, exit 130, and the agent keeps the answer so
#     far in the session (`sessions ls`: tokens and the KV bytes of them).
# usage: cli_context_interrupt_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"
head -n 80 "${heldout}" > "${work}/long.txt"      # ~2500 tokens: past 1024
head -n 30 "${heldout}" > "${work}/near.txt"      # ~960 tokens: fits, little room left

# Local mode: the trained context, refused before any work.
if "${baton}" generate --model "${model}" --prompt-file "${work}/long.txt" --max-tokens 4 --threads 1 \
  > "${work}/local-long.out" 2> "${work}/local-long.err"; then
  fail "baton generate --model ran a prompt past the trained context: $(tail -8 "${work}/local-long.out")"
fi
grep -q "the model's trained context is 1024 tokens" "${work}/local-long.err" \
  || fail "local refusal does not name the trained context: $(cat "${work}/local-long.err")"
"${baton}" generate --model "${model}" --prompt-file "${work}/near.txt" --max-tokens 200 --threads 1 --json \
  > "${work}/local-near.out" 2> "${work}/local-near.err" || fail "local near-full prompt: $(cat "${work}/local-near.err")"
grep -q "warning: .*exceed the model's trained context of 1024 tokens: at most [0-9]* tokens will be generated" \
  "${work}/local-near.err" || fail "no local clamp warning: $(cat "${work}/local-near.err")"

start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 2 --codec int4
edge="127.0.0.1:${server_port}"
"${baton}" health --edge "${edge}" --wait 60s > /dev/null || fail "edge not ready"

# The walkthrough's prompts fit (no refusal, no warning).
"${baton}" generate --edge "${edge}" --prompt-file "${src}/deploy/examples/chapter.txt" --session walk \
  --max-tokens 64 --no-progress > /dev/null 2> "${work}/walk1.err" || fail "walkthrough turn 1: $(cat "${work}/walk1.err")"
"${baton}" generate --edge "${edge}" -p "And what did he say then?" --session walk --no-progress \
  > /dev/null 2> "${work}/walk2.err" || fail "walkthrough turn 2: $(cat "${work}/walk2.err")"
! grep -q "warning" "${work}/walk1.err" "${work}/walk2.err" || fail "walkthrough warned: $(cat "${work}"/walk*.err)"

# The agent: the same refusal and the same warning.
if "${baton}" generate --edge "${edge}" --prompt-file "${work}/long.txt" --no-progress \
  > /dev/null 2> "${work}/edge-long.err"; then
  fail "the agent ran a prompt past the trained context"
fi
grep -q "INVALID_ARGUMENT.*the model's trained context is 1024 tokens" "${work}/edge-long.err" \
  || fail "edge refusal does not name the trained context: $(cat "${work}/edge-long.err")"
grep -q "memory is not the limit" "${work}/edge-long.err" || fail "edge refusal: $(cat "${work}/edge-long.err")"
"${baton}" generate --edge "${edge}" --prompt-file "${work}/near.txt" --max-tokens 200 --json \
  > "${work}/edge-near.json" 2> "${work}/edge-near.err" || fail "edge near-full prompt: $(cat "${work}/edge-near.err")"
grep -q "warning: .*exceed the model's trained context of 1024 tokens: at most [0-9]* tokens will be generated" \
  "${work}/edge-near.err" || fail "no edge clamp warning: $(cat "${work}/edge-near.err")"
[[ $(json_get "${work}/edge-near.json" 'd["stats"]["context_tokens"] <= 1024') == True ]] \
  || fail "context past 1024: $(cat "${work}/edge-near.json")"

# Ctrl-C mid-answer. An answer that ends before the signal lands decides
# nothing: up to 3 tries, each on a session of its own.
bytes_per_token=$("${baton}" health --edge "${edge}" --json \
  | "${python}" -c 'import json,sys; print(json.load(sys.stdin)["memory"]["capacity"][0]["kv_bytes_per_token"])')
decided=""
for try in 1 2 3; do
  session="int${try}"
  : > "${work}/int.out"
  "${baton}" generate --edge "${edge}" -p "And the LORD spake unto Moses, saying," --session "${session}" \
    --max-tokens 900 --temperature 0.8 --seed "${try}" --no-progress > "${work}/int.out" 2> "${work}/int.err" &
  client=$!
  for _ in $(seq 1 400); do
    [[ $(wc -c < "${work}/int.out") -ge 40 ]] && break
    kill -0 "${client}" 2> /dev/null || break
    sleep 0.01
  done
  kill -INT "${client}" 2> /dev/null || true
  code=0
  wait "${client}" || code=$?
  if [[ ${code} -eq 0 ]] && ! grep -q interrupted "${work}/int.err"; then
    echo "NOTE: try ${try}: the answer ended before Ctrl-C landed"
    continue
  fi
  decided=yes
  [[ ${code} -eq 130 ]] || fail "exit ${code} after Ctrl-C (want 130): $(cat "${work}/int.err")"
  [[ $(tail -c 1 "${work}/int.out" | od -An -c | tr -d ' ') == '\n' ]] || fail "the answer's line was not ended"
  grep -q "interrupted" "${work}/int.err" || fail "stats not marked interrupted: $(cat "${work}/int.err")"
  generated=$(sed -n 's/^ *generated tokens *\([0-9]*\).*/\1/p' "${work}/int.err")
  [[ -n "${generated}" && ${generated} -ge 1 ]] || fail "no generated tokens in the stats: $(cat "${work}/int.err")"
  "${baton}" sessions ls --edge "${edge}" --json > "${work}/ls.json" || fail "sessions ls"
  check=0
  "${python}" - "${work}/ls.json" "${session}" "${generated}" "${bytes_per_token}" <<'EOF' || check=$?
import json, sys
listing, session, generated, per_token = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [s for s in listing.get("sessions", []) if s["session_id"] == session]
assert rows, "the session was dropped"
row = rows[0]
tokens = int(row["token_count"])
# The prompt (about 12 tokens with BOS) and at least the tokens shown (the
# last sampled one may wait for the next turn).
assert tokens >= 10 + generated - 1, (tokens, generated)
assert int(row["kv_bytes"]) == tokens * per_token, (row["kv_bytes"], tokens, per_token)
if tokens >= 10 + 900 - 1:
    sys.exit(3)  # the whole answer: the agent had finished the turn when the cancel came
EOF
  if [[ ${check} -eq 3 ]]; then
    echo "NOTE: try ${try}: the agent had finished the answer when Ctrl-C landed"
    decided=""
    continue
  fi
  [[ ${check} -eq 0 ]] || fail "the session after Ctrl-C: $(cat "${work}/ls.json"); stats: $(cat "${work}/int.err")"
  # The next turn continues from it.
  "${baton}" generate --edge "${edge}" -p " And" --session "${session}" --max-tokens 4 --json --no-progress \
    > "${work}/next.json" 2> "${work}/next.err" || fail "turn after Ctrl-C: $(cat "${work}/next.err")"
  [[ $(json_get "${work}/next.json" "d['stats']['plan']['reused_tokens'] >= ${generated}") == True ]] \
    || fail "the next turn did not continue from the kept answer: $(cat "${work}/next.json")"
  break
done
[[ -n "${decided}" ]] || fail "every answer ended before Ctrl-C landed"
echo "PASS"
