#!/usr/bin/env bash
# The edge's chat page (GET / on --http) in a real browser: baton-prefill and
# baton-edge --http (with an API key) on loopback, the bundled model, and
# Debian's headless Chromium driven by playwright-core
# (tests/js/web_ui_test.mjs): the page says in words that it needs a key,
# takes it, streams a turn with policy cloud (the cloud prefills, the agent
# takes the KV over) and a follow-up in the same session, shows the stats
# (cloud prefill time, KV bytes, plan, a chart) and the session list, and its
# screenshot is checked for content. Set BATON_SCREENSHOT_DIR to keep the
# screenshot (web-ui.png). Skips only when Chromium or tests/js/node_modules
# is missing: `bash deploy/install-deps.sh --test` installs both.
# usage: web_ui_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
model="${bin}/../models/baton-tiny-kjv-q4_0.gguf"
cloud_model="${src}/deploy/models/baton-tiny-kjv-f16.gguf"
chromium=/usr/bin/chromium
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -x "${chromium}" ]] || skip "no ${chromium} (bash deploy/install-deps.sh --test installs Debian's chromium)"
[[ -d "${src}/tests/js/node_modules/playwright-core" ]] \
  || skip "no ${src}/tests/js/node_modules (bash deploy/install-deps.sh --test runs npm ci there)"
command -v node > /dev/null || skip "no node (bash deploy/install-deps.sh --test installs it)"
[[ -f "${model}" ]] || fail "bundled model ${model} not built (target baton_models)"

key="web-ui-test-key-0123456789abcdef"
echo "${key}" > "${work}/keys"
chmod 600 "${work}/keys"

start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${cloud_model}" --listen 127.0.0.1:0 --threads 1
cloud="127.0.0.1:${server_port}"
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --threads 1 \
  --http 127.0.0.1:0 --api-key-file "${work}/keys"
edge="127.0.0.1:${server_port}"
edge_pid=${server_pid}
wait_http_port "${work}/edge.log" "${edge_pid}"
# Both READY, and the agent has seen its cloud (the page's first turn asks for it).
"${bin}/baton" health --cloud "${cloud}" --wait 60s > /dev/null || fail "the cloud is not READY"
"${bin}/baton" health --edge "${edge}" --wait 60s > "${work}/health.txt" \
  || fail "the agent is not READY"

screenshot="${work}/web-ui.png"
BATON_WEB_URL="http://127.0.0.1:${http_port}/" BATON_API_KEY="${key}" BATON_SCREENSHOT="${screenshot}" \
  BATON_CHROMIUM="${chromium}" timeout 300 node "${src}/tests/js/web_ui_test.mjs" > "${work}/browser.log" 2>&1 \
  || fail "the browser test: $(cat "${work}/browser.log")"
cat "${work}/browser.log"
[[ -s "${screenshot}" ]] || fail "no screenshot"
if [[ -n "${BATON_SCREENSHOT_DIR:-}" ]]; then
  mkdir -p "${BATON_SCREENSHOT_DIR}"
  cp "${screenshot}" "${BATON_SCREENSHOT_DIR}/web-ui.png"
  echo "screenshot: ${BATON_SCREENSHOT_DIR}/web-ui.png"
fi
echo "web ui test: ok"
