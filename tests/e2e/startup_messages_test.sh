#!/usr/bin/env bash
# Start-up messages of baton-edge and baton-prefill: a start that fails prints
# its error exactly once and never "listening" first (every listener is bound
# and the model file checked before that line); on a machine without a GPU,
# baton-prefill says "CPU backend: no GPU found" once, at info level, and no
# CUDA driver warning.
# usage: startup_messages_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# A GGUF file that opens but is no model: the architecture's keys are missing.
"${python}" - "${work}/empty.gguf" << 'EOF'
import struct, sys
def text(s):
    b = s.encode()
    return struct.pack('<Q', len(b)) + b
kv = text("general.architecture") + struct.pack('<I', 8) + text("llama")
open(sys.argv[1], 'wb').write(b"GGUF" + struct.pack('<IQQ', 3, 0, 1) + kv)
EOF

# expect_failed_start NAME ERROR_TEXT COMMAND...: exit 1, ERROR_TEXT on exactly
# one line, no "listening" line. The old code said "listening" and then the
# error (twice on the edge: logged by the service, printed again by main).
expect_failed_start() {
  local name=$1 error=$2 log="${work}/$1.log" rc=0
  shift 2
  timeout 60 "$@" 2> "${log}" || rc=$?
  [[ ${rc} -eq 1 ]] || fail "${name}: exit code ${rc}, expected 1"
  [[ $(grep -c -- "${error}" "${log}") -eq 1 ]] || fail "${name}: '${error}' is not printed exactly once"
  ! grep -q "listening" "${log}" || fail "${name}: says 'listening' before its fatal error"
  echo "${name}: $(grep -- "${error}" "${log}")"
}

expect_failed_start edge-missing-model "cannot open GGUF file" \
  "${bin}/baton-edge" --model "${work}/missing.gguf" --listen 127.0.0.1:0
expect_failed_start prefill-missing-model "cannot open GGUF file" \
  "${bin}/baton-prefill" --model "${work}/missing.gguf" --listen 127.0.0.1:0
expect_failed_start edge-not-a-model "block_count' is missing" \
  "${bin}/baton-edge" --model "${work}/empty.gguf" --listen 127.0.0.1:0
expect_failed_start prefill-not-a-model "block_count' is missing" \
  "${bin}/baton-prefill" --model "${work}/empty.gguf" --listen 127.0.0.1:0

# baton-prefill's own start-up on this machine, READY, then stopped.
"${bin}/baton" model synth --shape tiny --type f16 -o "${work}/tiny-f16.gguf" > /dev/null
start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${work}/tiny-f16.gguf" --listen 127.0.0.1:0 --threads 1
for _ in $(seq 1 300); do
  grep -q "READY" "${work}/prefill.log" && break
  sleep 0.1
done
stop_server "${server_pid}"
grep -q "READY" "${work}/prefill.log" || fail "baton-prefill not READY"
! grep -qi "driver\|insufficient\|no usable GPU" "${work}/prefill.log" || fail "a CUDA driver warning"
! grep -q "^[WE] " "${work}/prefill.log" || fail "a warning or error in a clean start"
cuda=$("${bin}/baton-prefill" --version | sed -n 's/^CUDA: *//p')
case "${cuda}" in
  *"no GPU found"*)
    [[ $(grep -c "CPU backend: no GPU found" "${work}/prefill.log") -eq 1 ]] ||
      fail "expected one 'CPU backend: no GPU found' line"
    grep -q "^I .*CPU backend: no GPU found" "${work}/prefill.log" || fail "'no GPU found' is not at info level"
    ;;
  off*) echo "NOTE: built without CUDA: no GPU probe to check (${cuda})" ;;
  *) echo "NOTE: a GPU is present (${cuda}): the no-GPU line is not expected here" ;;
esac
echo "--- baton-prefill's start-up:"
cat "${work}/prefill.log"
echo "startup messages test: ok"
