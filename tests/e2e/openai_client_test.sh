#!/usr/bin/env bash
# The official `openai` npm client (tests/js, pinned in package-lock.json)
# against baton-edge --http with an API key on loopback:
# tests/js/openai_client_test.mjs drives chat (JSON and streamed),
# completions, logprobs (chat top_logprobs and legacy, streamed too),
# penalties, an unsupported field (400 naming it), a model alias and any
# model name, and a wrong key (401). Skipped only when node or
# tests/js/node_modules is absent (deploy/install-deps.sh --test installs them).
# usage: openai_client_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v node > /dev/null || skip "node is not installed (bash deploy/install-deps.sh --test)"
[[ -d "${src}/tests/js/node_modules/openai" ]] ||
  skip "tests/js/node_modules/openai is absent (npm ci --prefix ${src}/tests/js, or deploy/install-deps.sh --test)"

"${bin}/baton" model synth --shape tiny --type f16 -o "${work}/tiny-f16.gguf" > /dev/null
"${bin}/baton" model quantize "${work}/tiny-f16.gguf" "${work}/tiny.gguf" --type q4_0 > /dev/null
key="openai-client-test-key-0123456789"
echo "${key}" > "${work}/keys.txt"
chmod 600 "${work}/keys.txt"

start_server baton-edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --http 127.0.0.1:0 --threads 1 \
  --memory-budget 1GiB --api-key-file "${work}/keys.txt" --model-alias gpt-4o-mini,llama
pid=${server_pid}
wait_http_port "${work}/baton-edge.log" "${pid}"
base="http://127.0.0.1:${http_port}"
code=""
for _ in $(seq 1 300); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "${base}/health" || true)
  [[ "${code}" == 200 ]] && break
  sleep 0.1
done
[[ "${code}" == 200 ]] || fail "/health never answered 200 (last ${code})"

# The served id: the model's GGUF general.name, as the agent's READY line names it.
served=$(sed -n 's/.*READY: \([^ ]*\) (.*/\1/p' "${work}/baton-edge.log" | head -1)
[[ -n "${served}" ]] || fail "no model name in the agent's READY line"
BATON_BASE_URL="${base}/v1" BATON_API_KEY="${key}" BATON_MODEL="${served}" BATON_ALIAS=llama \
  node "${src}/tests/js/openai_client_test.mjs" > "${work}/node.log" 2>&1 ||
  fail "openai client test: $(cat "${work}/node.log")"
cat "${work}/node.log"
echo "PASS: openai npm client $(node -p "require('${src}/tests/js/node_modules/openai/package.json').version")"
