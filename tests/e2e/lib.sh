# shellcheck shell=bash
# Scaffolding shared by the end-to-end scripts in this folder. Sourced, not
# run: it is not a test (no _test.sh suffix, so the e2e/*_test.sh glob of
# tests/CMakeLists.txt does not register it).
#
# Usage, after `set -euo pipefail` and reading the script's arguments:
#   # shellcheck source-path=SCRIPTDIR source=lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sets:
#   work            a fresh temporary directory (mktemp -d), removed at exit.
#   pids            background processes ended at exit: start_server appends
#                   to it; a script appends what it starts itself.
#   python          /usr/bin/python3 (the python3 on PATH may lack numpy),
#                   else the python3 on PATH.
#   cleanup_signal  the signal cleanup sends to pids: TERM; a script that
#                   wants kill -9 sets it to KILL after sourcing.
# and installs `trap cleanup EXIT`.
#
# Functions:
#   fail MESSAGE...
#       "FAIL: MESSAGE" on stderr, then the last 20 lines of every
#       ${work}/*.log under a "--- NAME.log" header; exits 1.
#   skip REASON...
#       "SKIP: REASON" (one line) on stdout; exits 77, which
#       tests/CMakeLists.txt declares as the scripts' SKIP_RETURN_CODE, so
#       ctest reports the test as skipped, not passed. Only for a test that
#       cannot run here at all (no root, no network namespaces, a missing
#       tool); a check left out of a test that otherwise ran is a NOTE line.
#   bundled_models
#       sets model (the bundled Q4_0 GGUF the build makes in BIN_DIR/../models),
#       cloud_model (its F16 source under deploy/models) and heldout (the
#       text it was not trained on) from ${bin} and ${src} (or the tree this
#       file is in); fails when the
#       Q4_0 GGUF is not built.
#   json_get FILE EXPR
#       prints the Python expression EXPR evaluated over the JSON document
#       in FILE (bound to `d`), e.g. json_get x.json 'd["stats"]["place"]'.
#   start_server NAME PATTERN COMMAND...
#       runs COMMAND in the background with
#       its stderr in ${work}/NAME.log (created before the job starts, so the
#       sed that polls it never races it) and waits, 30 s at most, until the
#       sed expression PATTERN (with one \(group\), e.g.
#       '.*listening on port \([0-9]*\).*') matches a line of that log.
#       Sets server_port (the group's text of the first match) and server_pid,
#       and appends server_pid to pids. Fails "NAME exited: LOG" if the job
#       ends first, "NAME did not report its port" after 30 s. COMMAND may
#       be a shell function, but then server_pid is a subshell's, and killing
#       it can leave the program running: prefer a program (or a wrapper that
#       execs it, like deploy/wan/wan-exec.sh).
#   forget PID
#       drops PID from pids: call it once PID is reaped (its id may be reused).
#   stop_server PID [SIGNAL]
#       sends SIGNAL (default TERM) to PID, reaps it (bash's "Killed" notice
#       is dropped), and forgets it. Sets stop_status to PID's exit status
#       (0 for a clean exit, 128 + N for death by signal N); never fails.
#   cleanup
#       the EXIT trap: sends cleanup_signal to every pid, reaps them, calls
#       cleanup_hook, then removes ${work}.
#   cleanup_hook
#       does nothing here; a script redefines it for extra cleanup (unmount a
#       tmpfs, tear down network namespaces). It runs after the processes are
#       gone and before ${work} is removed; its failures are ignored.

work=$(mktemp -d)
pids=()
python=/usr/bin/python3
[[ -x "${python}" ]] || python=$(command -v python3 || echo python3)
cleanup_signal=TERM

cleanup_hook() { :; }

cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -s "${cleanup_signal}" "${pid}" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do { wait "${pid}" || true; } 2> /dev/null; done
  cleanup_hook || true
  rm -rf "${work}"
}
trap cleanup EXIT

fail() {
  local log
  echo "FAIL: $*" >&2
  for log in "${work}"/*.log; do [[ -f "${log}" ]] && { echo "--- ${log##*/}" >&2; tail -20 "${log}" >&2; }; done
  exit 1
}

skip() {
  echo "SKIP: $*"
  exit 77
}

json_get() { "${python}" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# wait_http_port LOG PID: sets http_port from baton-edge's "HTTP API on
# HOST:PORT" line in LOG (printed once every listener is bound); fails when the
# process PID exits first or the line never comes.
wait_http_port() {
  local log=$1 pid=$2
  http_port=""
  for _ in $(seq 1 300); do
    http_port=$(sed -n 's/.*HTTP API on [^ ]*:\([0-9]*\)$/\1/p' "${log}" | head -1)
    [[ -n "${http_port}" ]] && return 0
    kill -0 "${pid}" 2> /dev/null || fail "baton-edge exited before serving HTTP"
    sleep 0.1
  done
  fail "no 'HTTP API on' line in ${log##*/}"
}

start_server() {
  local name=$1 pattern=$2 log="${work}/$1.log"
  shift 2
  : > "${log}"  # exists before the background job opens it (sed below reads it at once)
  "$@" 2> "${log}" &
  server_pid=$!
  pids+=("${server_pid}")
  for _ in $(seq 1 600); do
    server_port=$(sed -n "s/${pattern}/\1/p" "${log}" | head -1)
    [[ -n "${server_port}" ]] && return 0
    kill -0 "${server_pid}" 2> /dev/null || fail "${name} exited: $(cat "${log}")"
    sleep 0.05
  done
  fail "${name} did not report its port"
}

forget() {
  local pid=$1 remaining=() p
  for p in "${pids[@]}"; do [[ "${p}" == "${pid}" ]] || remaining+=("${p}"); done
  pids=("${remaining[@]}")
}

# shellcheck disable=SC2034  # stop_status is read by the caller
stop_server() {
  kill -s "${2:-TERM}" "$1" 2> /dev/null || true
  stop_status=0
  { wait "$1" || stop_status=$?; } 2> /dev/null
  forget "$1"
}

# The sourcing script sets bin and src and reads what this sets.
# shellcheck disable=SC2034,SC2154
bundled_models() {
  # A script without ${src} is in the source tree's tests/e2e, like this file.
  local root=${src:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
  model="${bin}/../models/baton-tiny-kjv-q4_0.gguf"
  cloud_model="${root}/deploy/models/baton-tiny-kjv-f16.gguf"
  heldout="${root}/deploy/models/baton-tiny-kjv.heldout.txt"
  [[ -f "${model}" ]] || fail "bundled model ${model} not built (target baton_bundled_models)"
}
