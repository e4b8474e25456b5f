#!/usr/bin/env bash
# `baton chat` and the CLI's first-hour behaviour against real servers
# (baton-prefill and baton-edge with --http on loopback, the bundled model):
#   - `baton chat` alone (address from $BATON_EDGE) through a pipe: two turns
#     in one session, the second continuing the first (its context holds the
#     first turn); /stats prints the stats table; /save NAME records the
#     session and `baton chat --session NAME` resumes it; /reset starts a new
#     session; unknown commands are named; scripted input (not a terminal);
#   - `baton chat --model F`: the same loop on the CPU engine here;
#   - Ctrl-C (SIGINT) in `baton chat` mid-answer: "[stopped]", the chat goes
#     on, and the next turn continues from the answer kept so far;
#   - `baton generate --prompt-file -` reads the prompt from stdin;
#   - `--edge` pointed at the cloud or at the edge's HTTP port says so in words;
#   - help and flags: --no-progress (never --no-no-progress), "did you mean"
#     in baton and baton-edge, every bench listed, quantize's inputs listed.
# usage: cli_chat_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"
export HOME="${work}/home" BATON_HOME=""  # /save writes under ${work}
unset BATON_EDGE BATON_CLOUD

# --- help and flags (no server needed) ---------------------------------------
"${baton}" generate --help > "${work}/gen-help.txt" || fail "generate --help"
grep -q -- "--no-progress " "${work}/gen-help.txt" || fail "generate --help lacks --no-progress"
! grep -q -- "no-no-progress" "${work}/gen-help.txt" || fail "generate --help shows --[no-]no-progress"
for want in "--model FILE" "--edge ADDR" "edge agent only" "CPU engine only" "default \$BATON_EDGE, else 127.0.0.1:7071" \
  "--prompt-file FILE" "- reads standard input"; do
  grep -qF -- "${want}" "${work}/gen-help.txt" || fail "generate --help lacks '${want}': $(cat "${work}/gen-help.txt")"
done
rc=0
"${baton}" generate --model "${model}" --temprature 0 -p x 2> "${work}/typo.err" || rc=$?
[[ ${rc} -eq 2 ]] || fail "mistyped flag: exit ${rc}"
grep -qF "unknown flag --temprature; did you mean --temperature?" "${work}/typo.err" || fail "no suggestion: $(cat "${work}/typo.err")"
rc=0
"${bin}/baton-edge" --modle "${model}" --listen 127.0.0.1:0 2> "${work}/edge-typo.err" || rc=$?
[[ ${rc} -eq 2 ]] || fail "baton-edge mistyped flag: exit ${rc}"
grep -qF "did you mean --model?" "${work}/edge-typo.err" || fail "baton-edge: no suggestion: $(cat "${work}/edge-typo.err")"
"${baton}" bench --help > "${work}/bench-help.txt"
for name in decode prefill prefill-service prefill-cuda split load kv-codec kv-quality perplexity fidelity; do
  grep -q "^  ${name} " "${work}/bench-help.txt" || fail "bench --help lacks ${name}: $(cat "${work}/bench-help.txt")"
done
"${baton}" model quantize --help > "${work}/quantize-help.txt"
for want in "IN.gguf OUT.gguf" q4_0 q8_0 bf16 "IN: a GGUF model"; do
  grep -qF -- "${want}" "${work}/quantize-help.txt" || fail "quantize --help lacks '${want}'"
done

# --- chat on the CPU engine here -------------------------------------------------
printf 'In the beginning\n/stast\n/stats\n' |
  "${baton}" chat --model "${model}" --max-tokens 8 --temperature 0 > "${work}/local.out" 2> "${work}/local.err" ||
  fail "chat --model: $(cat "${work}/local.err")"
[[ -n "$(tr -d '[:space:]' < "${work}/local.out")" ]] || fail "chat --model printed no answer"
grep -qF "unknown command /stast; did you mean /stats?" "${work}/local.err" || fail "chat: typo not named: $(cat "${work}/local.err")"
grep -q "local CPU engine" "${work}/local.err" || fail "chat --model /stats: $(cat "${work}/local.err")"

# --- servers ------------------------------------------------------------------
start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${model}" --listen 127.0.0.1:0 --threads 2
cloud="127.0.0.1:${server_port}"
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --threads 2 --http 127.0.0.1:0
edge="127.0.0.1:${server_port}"
http_port=""
for _ in $(seq 1 600); do
  http_port=$(sed -n 's/.*HTTP API on [^:]*:\([0-9]*\).*/\1/p' "${work}/edge.log" | head -1)
  [[ -n "${http_port}" ]] && break
  sleep 0.05
done
[[ -n "${http_port}" ]] || fail "the edge did not report its HTTP port"
"${baton}" health --edge "${edge}" --wait 60s > /dev/null || fail "edge not READY"

# --- chat with the agent, the address from $BATON_EDGE ----------------------------
# Prints the number in the stats table row LABEL of the Nth /stats of FILE.
stat() { grep -E "^ *$2 " "$1" | sed -n "$3p" | grep -oE '[0-9]+' | head -1; }
printf '%s\n' "In the beginning God created the heaven and the earth." "And the earth was without form" \
  /stats "/save mychat" /reset "And God said" /stats /quit "never sent" |
  BATON_EDGE="${edge}" "${baton}" chat --max-tokens 12 --temperature 0 --policy local \
    > "${work}/chat.out" 2> "${work}/chat.err" || fail "chat: $(cat "${work}/chat.err")"
first_session=$(grep -oE 'session chat-[0-9a-f]{12}' "${work}/chat.err" | head -1 | cut -d' ' -f2)
[[ -n "${first_session}" ]] || fail "chat printed no session id: $(cat "${work}/chat.err")"
grep -q "chat with the edge agent at ${edge}" "${work}/chat.err" || fail "chat did not use \$BATON_EDGE: $(cat "${work}/chat.err")"
(( $(grep -c . "${work}/chat.out") >= 3 )) || fail "chat: expected three answers: $(cat "${work}/chat.out")"
# The second turn continues the first: its context holds both turns.
prompt2=$(stat "${work}/chat.err" "prompt tokens" 1)
generated2=$(stat "${work}/chat.err" "generated tokens" 1)
context2=$(stat "${work}/chat.err" "context tokens" 1)
(( context2 > prompt2 + generated2 )) ||
  fail "second turn did not continue the first: context ${context2}, prompt ${prompt2}, generated ${generated2}"
# After /reset: a new session, whose context is only its own turn.
prompt3=$(stat "${work}/chat.err" "prompt tokens" 2)
generated3=$(stat "${work}/chat.err" "generated tokens" 2)
context3=$(stat "${work}/chat.err" "context tokens" 2)
# (The session's KV holds the prompt and every generated token but the last
# sampled one, which runs with the next turn; after an end-of-sequence, all.)
(( context3 == prompt3 + generated3 - 1 || context3 == prompt3 + generated3 )) ||
  fail "/reset kept the old conversation: context ${context3}, prompt ${prompt3}, generated ${generated3}"
second_session=$(grep -oE 'new session chat-[0-9a-f]{12}' "${work}/chat.err" | cut -d' ' -f3)
[[ -n "${second_session}" && "${second_session}" != "${first_session}" ]] || fail "/reset: no new session id"
"${baton}" sessions ls --edge "${edge}" --json > "${work}/sessions.json"
for s in "${first_session}" "${second_session}"; do
  grep -q "\"${s}\"" "${work}/sessions.json" || fail "session ${s} not on the agent: $(cat "${work}/sessions.json")"
done
# /save: the name resolves to the first session, and --session NAME resumes it.
grep -q "^mychat ${first_session}$" "${HOME}/.baton/chat-names" || fail "/save: $(cat "${HOME}/.baton/chat-names")"
printf '%s\n' "And God saw the light" /stats |
  BATON_EDGE="${edge}" "${baton}" chat --session mychat --max-tokens 4 --temperature 0 --policy local \
    > "${work}/resume.out" 2> "${work}/resume.err" || fail "chat --session mychat: $(cat "${work}/resume.err")"
grep -q "session ${first_session}" "${work}/resume.err" || fail "--session mychat: $(cat "${work}/resume.err")"
context4=$(stat "${work}/resume.err" "context tokens" 1)
(( context4 > context2 )) || fail "--session mychat did not resume: context ${context4} <= ${context2}"

# --- Ctrl-C in chat: the answer stops, the chat goes on, the agent keeps it ---
# The first message goes in, SIGINT lands once its answer has started, then a
# second message and /stats. An answer that ends before the signal lands
# decides nothing: up to 3 tries, each a chat (session) of its own.
decided=""
for try in 1 2 3; do
  rm -f "${work}/chat-in"
  mkfifo "${work}/chat-in"
  : > "${work}/int-chat.out"
  BATON_EDGE="${edge}" "${baton}" chat --max-tokens 900 --temperature 0.8 --seed "${try}" --policy local \
    < "${work}/chat-in" > "${work}/int-chat.out" 2> "${work}/int-chat.err" &
  client=$!
  exec 7> "${work}/chat-in"
  echo "Tell me of the kings of Israel" >&7
  for _ in $(seq 1 400); do
    [[ $(wc -c < "${work}/int-chat.out") -ge 40 ]] && break
    kill -0 "${client}" 2> /dev/null || break
    sleep 0.01
  done
  kill -INT "${client}" 2> /dev/null || true
  # The chat goes on after a Ctrl-C: a second message, its stats, the end.
  printf '%s\n' "And then?" /stats >&7
  exec 7>&-
  code=0
  wait "${client}" || code=$?
  [[ ${code} -eq 0 ]] || fail "chat exited ${code} after one Ctrl-C: $(cat "${work}/int-chat.err")"
  if ! grep -q '^\[stopped\]$' "${work}/int-chat.err"; then
    echo "NOTE: try ${try}: the answer ended before Ctrl-C landed"
    continue
  fi
  decided=yes
  # The second turn continued the stopped one: the agent kept its prompt (28
  # tokens with the chat template) and the tokens generated before the cancel
  # (40+ bytes of text were shown), so more than the prompt alone is reused.
  reused=$(stat "${work}/int-chat.err" "reused tokens \\(edge\\)" 1)
  generated=$(stat "${work}/int-chat.err" "generated tokens" 1)
  [[ -n "${reused}" && -n "${generated}" ]] || fail "no stats after Ctrl-C: $(cat "${work}/int-chat.err")"
  (( reused > 35 )) || fail "the stopped answer was not kept: the next turn reused ${reused} tokens"
  break
done
[[ -n "${decided}" ]] || fail "every chat answer ended before Ctrl-C landed (3 tries)"

# --- --prompt-file - reads stdin ------------------------------------------------------
printf 'And God said' | "${baton}" generate --edge "${edge}" --prompt-file - --max-tokens 4 --temperature 0 --json \
  > "${work}/stdin.json" 2> "${work}/stdin.err" || fail "--prompt-file -: $(cat "${work}/stdin.err")"
"${baton}" generate --edge "${edge}" -p 'And God said' --max-tokens 4 --temperature 0 --json > "${work}/arg.json"
[[ $(json_get "${work}/stdin.json" 'd["stats"]["prompt_tokens"]') == $(json_get "${work}/arg.json" 'd["stats"]["prompt_tokens"]') ]] ||
  fail "--prompt-file - and -p differ"
[[ $(json_get "${work}/stdin.json" 'd["text"]') == $(json_get "${work}/arg.json" 'd["text"]') ]] || fail "--prompt-file -: other text"

# --- the wrong server, said in words ----------------------------------------------------
rc=0
"${baton}" generate --edge "${cloud}" -p hi 2> "${work}/at-cloud.err" || rc=$?
[[ ${rc} -eq 1 ]] || fail "--edge at the cloud: exit ${rc}"
grep -qF "${cloud} is a baton-prefill (cloud) service, not an edge agent: use --cloud for pack commands or point --edge at baton-edge's --listen" \
  "${work}/at-cloud.err" || fail "--edge at the cloud: $(cat "${work}/at-cloud.err")"
rc=0
"${baton}" sessions ls --edge "127.0.0.1:${http_port}" 2> "${work}/at-http.err" || rc=$?
[[ ${rc} -eq 1 ]] || fail "--edge at the HTTP port: exit ${rc}"
grep -qF "127.0.0.1:${http_port} answers HTTP/1.1: that is the edge's --http port; --edge takes its gRPC --listen address" \
  "${work}/at-http.err" || fail "--edge at the HTTP port: $(cat "${work}/at-http.err")"
echo "cli chat: ok"
