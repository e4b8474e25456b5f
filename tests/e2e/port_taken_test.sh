#!/usr/bin/env bash
# A port that is taken is refused: a second baton-prefill or baton-edge on the
# --listen, --http or --metrics port of a running one exits 1 with one line
# naming the address and the OS reason ("address already in use") and never
# says "listening" or READY (gRPC's default SO_REUSEPORT used to let both
# share the port, the calls alternating between the two processes). The first
# ones still serve.
# usage: port_taken_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"${bin}/baton" model synth --shape tiny --type f16 -o "${work}/tiny-f16.gguf" > /dev/null
"${bin}/baton" model quantize "${work}/tiny-f16.gguf" "${work}/tiny.gguf" --type q4_0 > /dev/null

start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1
cloud_port=${server_port}
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --http 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --threads 1 --memory-budget 1GiB
edge_port=${server_port}
# The other ports are announced after "listening on" (all bound by then).
for _ in $(seq 1 100); do
  http_port=$(sed -n 's/.*HTTP API on [^ ]*:\([0-9]*\)$/\1/p' "${work}/edge.log" | head -1)
  edge_metrics_port=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "${work}/edge.log" | head -1)
  [[ -n "${http_port}" && -n "${edge_metrics_port}" ]] && break
  sleep 0.1
done
cloud_metrics_port=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "${work}/prefill.log" | head -1)
[[ -n "${http_port}" && -n "${edge_metrics_port}" && -n "${cloud_metrics_port}" ]] || fail "ports not announced"

# expect_refused NAME ADDRESS COMMAND...: COMMAND must exit 1 with exactly one
# line "...cannot listen on ADDRESS: address already in use" and no
# "listening" / READY. On the old code the second process started: it is
# stopped as soon as it says so (30 s at most).
expect_refused() {
  local name=$1 address=$2 log="${work}/$1.log" pid rc
  shift 2
  : > "${log}"
  "$@" 2> "${log}" &
  pid=$!
  pids+=("${pid}")
  for _ in $(seq 1 300); do
    kill -0 "${pid}" 2> /dev/null || break
    if grep -q "listening on\|READY" "${log}"; then
      stop_server "${pid}" KILL
      fail "${name}: a second process started on a taken port: $(cat "${log}")"
    fi
    sleep 0.1
  done
  rc=0
  wait "${pid}" || rc=$?
  forget "${pid}"
  [[ ${rc} -eq 1 ]] || fail "${name}: exit code ${rc}, expected 1: $(cat "${log}")"
  [[ $(grep -c "cannot listen on ${address}: address already in use" "${log}") -eq 1 ]] ||
    fail "${name}: expected one 'cannot listen on ${address}: address already in use' line: $(cat "${log}")"
  [[ $(grep -c "" "${log}") -le 2 ]] || fail "${name}: more than the error (and one info line): $(cat "${log}")"
  ! grep -q "listening\|READY\|chttp2" "${log}" || fail "${name}: says more than the error: $(cat "${log}")"
  echo "${name}: $(grep "cannot listen" "${log}")"
}

expect_refused prefill-on-cloud-port "127.0.0.1:${cloud_port}" \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen "127.0.0.1:${cloud_port}" --threads 1
expect_refused prefill-on-edge-port "127.0.0.1:${edge_port}" \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen "${edge_port}" --threads 1
expect_refused prefill-metrics-taken "127.0.0.1:${cloud_metrics_port}" \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen 127.0.0.1:0 --metrics "127.0.0.1:${cloud_metrics_port}" \
  --threads 1
expect_refused edge-on-edge-port "127.0.0.1:${edge_port}" \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen "127.0.0.1:${edge_port}" --threads 1 --memory-budget 1GiB
expect_refused edge-on-cloud-port "127.0.0.1:${cloud_port}" \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen "${cloud_port}" --threads 1 --memory-budget 1GiB
expect_refused edge-http-taken "127.0.0.1:${http_port}" \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --http "${http_port}" --threads 1 \
  --memory-budget 1GiB
expect_refused edge-metrics-taken "127.0.0.1:${edge_metrics_port}" \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --metrics "127.0.0.1:${edge_metrics_port}" \
  --threads 1 --memory-budget 1GiB

# The first ones still serve, on every port.
"${bin}/baton" health --cloud "127.0.0.1:${cloud_port}" --wait 30s > "${work}/cloud-health.txt" ||
  fail "the first baton-prefill stopped serving"
"${bin}/baton" health --edge "127.0.0.1:${edge_port}" --wait 30s > "${work}/edge-health.txt" ||
  fail "the first baton-edge stopped serving"
grep -q READY "${work}/cloud-health.txt" || fail "cloud not READY: $(cat "${work}/cloud-health.txt")"
grep -q READY "${work}/edge-health.txt" || fail "edge not READY: $(cat "${work}/edge-health.txt")"
curl -sf "http://127.0.0.1:${http_port}/health" > /dev/null || fail "the first edge's HTTP API stopped serving"
curl -sf "http://127.0.0.1:${edge_metrics_port}/metrics" > /dev/null || fail "the first edge's metrics stopped"
curl -sf "http://127.0.0.1:${cloud_metrics_port}/metrics" > /dev/null || fail "the first cloud's metrics stopped"

# The port-alone form the README documents (--http 8080): loopback, on every
# listening flag of both programs.
start_server edge-ports-alone '.*listening on 127\.0\.0\.1:\([0-9]*\) .*' \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 0 --http 0 --metrics 0 --threads 1 --memory-budget 1GiB
for _ in $(seq 1 100); do
  grep -q "metrics on port" "${work}/edge-ports-alone.log" && break
  sleep 0.1
done
alone_http=$(sed -n 's/.*HTTP API on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "${work}/edge-ports-alone.log" | head -1)
alone_metrics=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "${work}/edge-ports-alone.log" | head -1)
[[ -n "${alone_http}" && -n "${alone_metrics}" ]] || fail "--http 0 / --metrics 0: not announced on 127.0.0.1"
"${bin}/baton" health --edge "127.0.0.1:${server_port}" --wait 30s > /dev/null || fail "--listen 0: no Health"
curl -sf "http://127.0.0.1:${alone_http}/health" > /dev/null || fail "--http 0: not serving on 127.0.0.1"
curl -sf "http://127.0.0.1:${alone_metrics}/metrics" > /dev/null || fail "--metrics 0: not serving on 127.0.0.1"
start_server prefill-ports-alone '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen 0 --metrics 0 --threads 1
"${bin}/baton" health --cloud "127.0.0.1:${server_port}" --wait 30s > /dev/null || fail "prefill --listen 0: no Health"
echo "port taken test: ok"
