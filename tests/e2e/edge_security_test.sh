#!/usr/bin/env bash
# baton-edge's security defaults as a process: a cloud outside this machine
# needs TLS (--cloud-ca) or an explicit --cloud-plaintext; session files are
# readable by their owner only (files 0600, directory 0700); a listener
# beyond loopback needs --api-key-file (exit 2 and one line otherwise, unless
# --insecure-public); a group-readable key file is refused; with keys and
# --tls-cert the agent serves TLS gRPC and HTTPS, `baton` reaches it with
# --ca and --api-key-file, and a missing or wrong key is refused.
# usage: edge_security_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
model="${bin}/../models/baton-tiny-kjv-q4_0.gguf"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f "${model}" ]] || fail "bundled model ${model} not built"

# Plaintext to a remote cloud: refused with one line, exit 2.
set +e
"${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud 10.255.255.1:50051 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "plaintext remote cloud: exit code ${rc}"
grep -q "plaintext" "${work}/err.txt" || fail "plaintext remote cloud message: $(cat "${work}/err.txt")"
grep -q -- "--cloud-ca" "${work}/err.txt" || fail "the message does not say how to fix it: $(cat "${work}/err.txt")"

# Starts the agent (with the given extra flags) and waits for its port:
# sets server_port and server_pid.
start_edge() {
  start_server baton-edge '.*listening on [^:]*:\([0-9]*\).*' \
    "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 1 "$@"
}

# --cloud-plaintext accepts it (the agent serves; the cloud is simply unreachable).
start_edge --cloud 10.255.255.1:50051 --cloud-plaintext
stop_server "${server_pid}"

# Session files: owner only.
start_edge --sessions "${work}/sessions"
"${bin}/baton" generate --edge "127.0.0.1:${server_port}" -p "In the beginning" --session private-1 --max-tokens 4 \
  --policy local > /dev/null 2> "${work}/gen.err" || fail "generate: $(cat "${work}/gen.err")"
[[ "$(stat -c %a "${work}/sessions")" == "700" ]] || fail "sessions dir mode $(stat -c %a "${work}/sessions")"
file="${work}/sessions/private-1.session"
[[ -f "${file}" ]] || fail "no session file: $(ls -la "${work}/sessions")"
[[ "$(stat -c %a "${file}")" == "600" ]] || fail "session file mode $(stat -c %a "${file}")"

# A listener beyond loopback without keys: exit 2, one line that says how to fix it.
for flags in "--listen 0.0.0.0:0" "--listen [::]:0" "--listen 127.0.0.1:0 --http 0.0.0.0:0" \
             "--listen 127.0.0.1:0 --metrics 10.1.2.3:9100" "--listen 127.attacker.example:0"; do
  set +e
  # shellcheck disable=SC2086  # the flags are meant to split
  "${bin}/baton-edge" --model "${model}" ${flags} 2> "${work}/err.txt"; rc=$?
  set -e
  [[ ${rc} -eq 2 ]] || fail "${flags} without keys: exit code ${rc}"
  [[ $(wc -l < "${work}/err.txt") -eq 1 ]] || fail "${flags}: not one line: $(cat "${work}/err.txt")"
  grep -q -- "--api-key-file" "${work}/err.txt" || fail "${flags}: no fix named: $(cat "${work}/err.txt")"
  grep -q -- "--insecure-public" "${work}/err.txt" || fail "${flags}: no --insecure-public: $(cat "${work}/err.txt")"
done
# --insecure-public accepts it.
start_edge --http 0.0.0.0:0 --insecure-public
stop_server "${server_pid}"

# Keys: a key file others can read is refused, naming its mode and the fix.
printf '# two users\nalice-key-0123456789\nbob-key-0123456789ab\n' > "${work}/keys"
chmod 644 "${work}/keys"
set +e
"${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --api-key-file "${work}/keys" 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "world-readable key file: exit code ${rc}"
grep -q "0644.*chmod 600" "${work}/err.txt" || fail "key file mode message: $(cat "${work}/err.txt")"
chmod 600 "${work}/keys"
echo alice-key-0123456789 > "${work}/alice.key"
echo wrong-key-0123456789 > "${work}/wrong.key"

# TLS + keys: gRPC over TLS (baton --ca), HTTPS (curl --cacert).
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout "${work}/tls.key" -out "${work}/tls.crt" \
  > /dev/null 2>&1 || fail "openssl could not make a test certificate"
start_edge --api-key-file "${work}/keys" --tls-cert "${work}/tls.crt" --tls-key "${work}/tls.key" --http 127.0.0.1:0
grep -q "TLS, API keys required" "${work}/baton-edge.log" || fail "no TLS/keys line: $(cat "${work}/baton-edge.log")"
edge="127.0.0.1:${server_port}"
"${bin}/baton" health --edge "${edge}" --ca "${work}/tls.crt" --wait 60s > /dev/null || fail "health over TLS"
if "${bin}/baton" health --edge "${edge}" --timeout 3s > /dev/null 2>&1; then fail "plaintext health on a TLS port"; fi
BATON_API_KEY_FILE="${work}/alice.key" "${bin}/baton" generate --edge "${edge}" --ca "${work}/tls.crt" \
  -p "In the beginning" --session mine --max-tokens 2 --policy local > /dev/null 2> "${work}/gen.err" ||
  fail "generate with a key over TLS: $(cat "${work}/gen.err")"
set +e
"${bin}/baton" sessions ls --edge "${edge}" --ca "${work}/tls.crt" > /dev/null 2> "${work}/nokey.err"; rc_none=$?
"${bin}/baton" sessions ls --edge "${edge}" --ca "${work}/tls.crt" --api-key-file "${work}/wrong.key" \
  > /dev/null 2> "${work}/wrong.err"; rc_wrong=$?
set -e
[[ ${rc_none} -ne 0 ]] && grep -q "missing API key" "${work}/nokey.err" || fail "no key: $(cat "${work}/nokey.err")"
[[ ${rc_wrong} -ne 0 ]] && grep -q "invalid API key" "${work}/wrong.err" || fail "wrong key: $(cat "${work}/wrong.err")"
"${bin}/baton" sessions ls --edge "${edge}" --ca "${work}/tls.crt" --api-key-file "${work}/alice.key" \
  > "${work}/ls.txt" || fail "sessions ls with a key"
grep -q "^mine " "${work}/ls.txt" || fail "alice does not see her session: $(cat "${work}/ls.txt")"
http_port=$(sed -n 's/.*HTTP API on [^ ]*:\([0-9]*\)$/\1/p' "${work}/baton-edge.log" | head -1)
[[ -n "${http_port}" ]] || fail "no HTTP port in the log"
code=$(curl -s --cacert "${work}/tls.crt" -o "${work}/models.json" -w '%{http_code}' \
  "https://127.0.0.1:${http_port}/v1/models" || true)
[[ "${code}" == 401 ]] || fail "HTTPS /v1/models without a key: ${code}"
grep -q '"invalid_api_key"' "${work}/models.json" || fail "401 body: $(cat "${work}/models.json")"
code=$(curl -s --cacert "${work}/tls.crt" -o /dev/null -w '%{http_code}' \
  -H "Authorization: Bearer alice-key-0123456789" "https://127.0.0.1:${http_port}/v1/models" || true)
[[ "${code}" == 200 ]] || fail "HTTPS /v1/models with a key: ${code}"
stop_server "${server_pid}"

# The CLI reaches a TLS cloud with tenant tokens: --cloud-ca and --cloud-token-file.
echo "cloud-token-0123456789 tenant-a" > "${work}/tokens"
echo cloud-token-0123456789 > "${work}/cloud.token"
start_server baton-prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${model}" --listen 127.0.0.1:0 --threads 1 \
  --tls-cert "${work}/tls.crt" --tls-key "${work}/tls.key" --auth-tokens "${work}/tokens"
cloud="127.0.0.1:${server_port}"
"${bin}/baton" health --cloud "${cloud}" --cloud-ca "${work}/tls.crt" --wait 60s > /dev/null || fail "health --cloud over TLS"
"${bin}/baton" pack build --cloud "${cloud}" --cloud-ca "${work}/tls.crt" --cloud-token-file "${work}/cloud.token" \
  -p "In the beginning" --id tls-pack --out "${work}/tls-pack.batonkv" > /dev/null 2> "${work}/build.err" ||
  fail "pack build over TLS with a token: $(cat "${work}/build.err")"
"${bin}/baton" pack push --cloud "${cloud}" --cloud-ca "${work}/tls.crt" --cloud-token-file "${work}/cloud.token" \
  "${work}/tls-pack.batonkv" > /dev/null 2> "${work}/push.err" || fail "pack push over TLS: $(cat "${work}/push.err")"
if "${bin}/baton" pack push --cloud "${cloud}" --cloud-ca "${work}/tls.crt" "${work}/tls-pack.batonkv" \
  > /dev/null 2> "${work}/push.err"; then fail "pack push without a token was accepted"; fi
stop_server "${server_pid}"
echo "edge security test: ok"
