#!/usr/bin/env bash
# The main job: installs the dependencies it needs (profile run), builds the
# three programs and the bundled model's Q4_0 copy (deploy/build.sh: the same
# build configuration as tests/run-all.sh, which then builds only the tests),
# then runs Baton end to end on loopback with the bundled tiny model:
#   1. baton-prefill (the cloud) serves the F16 source weights;
#   2. baton-edge (the agent) holds the Q4_0 copy (derived at build time) and
#      talks to the cloud;
#   3. a long prompt (held-out KJV verses, ~600 tokens) goes through the CLI:
#      the agent asks the cloud for the KV (and the reply's first 4 tokens,
#      sent ahead of it: --early-tokens 4), verifies and commits it, decodes
#      locally; the text streams and the stats table follows;
#   4. a follow-up turn on the same session (delta: only the new tokens);
#   5. both servers stop (SIGTERM: they drain and exit).
# Then the speed of the CPU engine at a real shape (synthetic Llama-3.2-1B, Q4_0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh --profile run
bash deploy/build.sh baton-prefill baton-edge baton baton_bundled_models
threads=$(nproc)
bin=build/bin
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2> /dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT

# Starts a server in the background and sets server_port from its log.
start_server() {
  local name=$1 pattern=$2
  shift 2
  "$@" > "${work}/${name}.out" 2> "${work}/${name}.log" &
  pids+=($!)
  for _ in $(seq 1 300); do
    server_port=$(sed -n "s/${pattern}/\1/p" "${work}/${name}.log" | head -1)
    [[ -n "${server_port}" ]] && return 0
    if ! kill -0 "${pids[-1]}" 2> /dev/null; then cat "${work}/${name}.log" >&2; return 1; fi
    sleep 0.1
  done
  echo "${name} did not report its port" >&2
  return 1
}

echo "== baton-prefill (cloud): deploy/models/baton-tiny-kjv-f16.gguf =="
start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model deploy/models/baton-tiny-kjv-f16.gguf --listen 127.0.0.1:0 --threads "${threads}"
cloud="127.0.0.1:${server_port}"
echo "== baton-edge (agent): build/models/baton-tiny-kjv-q4_0.gguf, cloud ${cloud} =="
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model build/models/baton-tiny-kjv-q4_0.gguf --listen 127.0.0.1:0 \
  --cloud "${cloud}" --threads "${threads}" --sessions "${work}/sessions"
edge="127.0.0.1:${server_port}"
"${bin}/baton" health --edge "${edge}" --wait 60s > /dev/null

head -n 20 deploy/models/baton-tiny-kjv.heldout.txt > "${work}/prompt.txt"
echo "== a long-prompt session through the CLI (prefill on the cloud, decode here) =="
"${bin}/baton" generate --edge "${edge}" --prompt-file "${work}/prompt.txt" --session demo --policy cloud \
  --max-tokens 64 --temperature 0.8 --top-k 40 --seed 1 --early-tokens 4
echo
echo "== a follow-up turn on the same session (policy auto: a short turn is prefilled here) =="
"${bin}/baton" generate --edge "${edge}" -p " And the LORD spake unto Moses, saying," --session demo \
  --max-tokens 48 --temperature 0.8 --top-k 40 --seed 2
echo
"${bin}/baton" sessions ls --edge "${edge}"
cleanup
trap - EXIT

echo "== synthetic llama-3.2-1b shape (Q4_0): CPU engine speed =="
model=build/models/llama-3.2-1b-q4_0.gguf
if [[ ! -f "${model}" ]]; then
  "${bin}/baton" model synth --shape llama-3.2-1b --type q4_0 --seed 1 -o "${model}"
fi
# Random weights: the text is noise, the stats are the point.
"${bin}/baton" generate --model "${model}" --prompt-len 512 --max-tokens 32 --threads "${threads}" | tail -6
