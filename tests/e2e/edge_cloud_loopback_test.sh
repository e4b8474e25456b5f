#!/usr/bin/env bash
# baton-edge allows plaintext to the cloud only on this machine, and "this
# machine" means the literals 127.0.0.0/8 and ::1 or the name localhost: a
# name that merely starts with "127." resolves wherever its owner wants.
# usage: edge_cloud_loopback_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
model="${bin}/../models/baton-tiny-kjv-q4_0.gguf"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f "${model}" ]] || fail "bundled model ${model} not built"

for cloud in 127.attacker.example:50051 127.0.0.1.nip.io:50051 localhost.attacker.example:50051; do
  set +e
  # An agent that accepts the address serves until killed: 20 s is plenty to refuse.
  timeout 20 "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" 2> "${work}/err.txt"
  rc=$?
  set -e
  [[ ${rc} -eq 2 ]] || fail "--cloud ${cloud}: exit code ${rc} (plaintext to a name outside loopback)"
  grep -q "plaintext" "${work}/err.txt" || fail "--cloud ${cloud} message: $(cat "${work}/err.txt")"
done

# Loopback literals start in plaintext (the cloud is simply not there).
for cloud in 127.0.0.2:1 '[::1]:1'; do
  start_server baton-edge '.*listening on [^:]*:\([0-9]*\).*' \
    "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 1 --cloud "${cloud}"
  stop_server "${server_pid}"
done
echo "edge cloud loopback test: ok"
