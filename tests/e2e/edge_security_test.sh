#!/usr/bin/env bash
# baton-edge's security defaults as a process: a cloud outside this machine
# needs TLS (--cloud-ca) or an explicit --cloud-plaintext; session files are
# readable by their owner only (files 0600, directory 0700).
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
echo "edge security test: ok"
