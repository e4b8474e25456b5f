#!/usr/bin/env bash
# baton-prefill as a process: serves once READY, drains and exits 0 on
# SIGTERM, refuses bad --auth-tokens / TLS flags with one clear line (exit 2).
# usage: prefill_process_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cleanup_signal=KILL

"${bin}/baton" model synth --shape tiny --type f16 -o "${work}/tiny.gguf" > /dev/null

# Bad configuration: one line, exit 2, nothing served.
printf 'short tenant\n' > "${work}/tokens.txt"
set +e
"${bin}/baton-prefill" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --auth-tokens "${work}/tokens.txt" \
  2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "bad auth file exit code ${rc}"
grep -q "tokens.txt:1" "${work}/err.txt" || fail "bad auth file message: $(cat "${work}/err.txt")"
set +e
"${bin}/baton-prefill" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --tls-cert "${work}/none.pem" \
  2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "--tls-cert without --tls-key exit code ${rc}"

# Serve, then SIGTERM: DRAINING, then a clean exit.
printf '%s alpha\n' "e2e-token-0123456789abcdef" > "${work}/tokens.txt"
: > "${work}/prefill.log"  # exists before the grep below reads it
"${bin}/baton-prefill" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --threads 1 \
  --auth-tokens "${work}/tokens.txt" 2> "${work}/prefill.log" &
pid=$!
pids+=("${pid}")
for _ in $(seq 1 300); do
  grep -q "READY" "${work}/prefill.log" && break
  kill -0 "${pid}" 2> /dev/null || fail "baton-prefill exited before READY"
  sleep 0.1
done
grep -q "READY" "${work}/prefill.log" || fail "baton-prefill not READY after 30 s"
grep -q "listening on port [1-9]" "${work}/prefill.log" || fail "no bound port in the log"
stop_server "${pid}"
[[ ${stop_status} -eq 0 ]] || fail "exit code ${stop_status} after SIGTERM"
grep -q "DRAINING" "${work}/prefill.log" || fail "no DRAINING in the log"
grep -q "drained, exiting" "${work}/prefill.log" || fail "did not drain cleanly"
echo "prefill process test: ok"
