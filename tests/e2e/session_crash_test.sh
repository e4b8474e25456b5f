#!/usr/bin/env bash
# Session durability of baton-edge under real faults (real processes, the
# bundled tiny model, loopback ports read from the logs):
#
# 1. kill -9 while a session is being saved. A greedy conversation runs on an
#    edge with --sessions DIR and the f16 store codec (the largest session
#    files); an inotify watcher SIGKILLs the edge the moment the session's
#    temp file ("<id>.session.tmp.*") is created, first written, closed, or
#    renamed (the phases rotate over the rounds; the first round kills the
#    save of the session's first turn), so kills land before, during and
#    after the write, the fsync and the rename. After each kill the edge
#    restarts on the same DIR and:
#      - the temp file of the interrupted save is removed at start;
#      - `baton sessions ls` shows the session with the tokens of the last
#        turn whose response the client fully received (no session at all
#        when that was none), or of the killed turn when its rename had
#        completed; never anything else (token count and prefix digest are
#        checked), and nothing is refused;
#        a temp file left behind by the kill proves the rename had not
#        happened, so then it must be the old turn;
#      - a greedy follow-up turn in the restored session gives the same
#        token ids as the same conversation on a reference edge that holds
#        it in memory only (never saved nor loaded): the KV on disk is
#        intact, not just its token count.
#    At least one kill must leave a temp file behind (a kill that provably
#    landed mid-save), or the test fails: otherwise it proved nothing.
# Part 2, a disk full while saving, is session_disk_full_test.sh (it needs
# mount(2), so it is its own test that ctest can show as skipped).
# bash reports each killed edge ("... Killed ... "$@" 2> "${log}"": the job that
# start_server of lib.sh started): expected.
# usage: session_crash_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
rounds=8          # kill -9 rounds
turn_tokens=8     # tokens generated per follow-up turn
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cleanup_signal=KILL
# shellcheck source-path=SCRIPTDIR source=session_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/session_lib.sh"
shopt -s nullglob

# The prompt of turn K: ~600 tokens of held-out text first, then short lines.
prompt_file() {
  local k=$1 file="${work}/prompt-$1.txt"
  if (( k == 1 )); then
    head -c 2400 "${held_out}" > "${file}"
  else
    tail -c "+$(( 2400 + (k - 2) * 40 + 1 ))" "${held_out}" | head -c 40 > "${file}"
  fi
  echo "${file}"
}

# Turn K of the conversation on session `conv`, greedy: turn_command ADDR K
# sets the array turn_cmd.
turn_command() {
  turn_cmd=("${baton}" generate --edge "$1" --session conv --policy local --temperature 0
    --max-tokens "${turn_tokens}" --prompt-file "$(prompt_file "$2")" --timeout 60s --json)
}
# turn ADDR K OUT_JSON: runs turn K; fails unless it completes.
turn() {
  local addr=$1 k=$2 out=$3
  turn_command "${addr}" "${k}"
  "${turn_cmd[@]}" > "${out}" 2> "${out%.json}.err" || fail "turn ${k} at ${addr}: $(cat "${out%.json}.err")"
}
token_ids() { "${python}" -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$1"; }

# ---------------------------------------------------------------------------
# 1. kill -9 while saving.
cat > "${work}/watch.py" << 'EOF'
# watch.py DIR PREFIX PID PHASE READY_FILE TIMEOUT_S: SIGKILLs PID when a file
# named PREFIX* in DIR is created (PHASE create), first written (write),
# closed after writing (close) or renamed (rename); prints the phase. Touches
# READY_FILE once the watch is in place. Exits 142 (SIGALRM) after TIMEOUT_S
# without an event. (inotify through ctypes: no package beyond python3.)
import ctypes, os, signal, struct, sys
directory, prefix, pid, phase, ready, timeout_s = sys.argv[1:7]
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_CREATE = 0x2, 0x8, 0x40, 0x100
want = {"create": IN_CREATE, "write": IN_MODIFY, "close": IN_CLOSE_WRITE, "rename": IN_MOVED_FROM}[phase]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_CLOEXEC)
if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), want) < 0:
    sys.exit("watch.py: inotify: " + os.strerror(ctypes.get_errno()))
open(ready, "w").close()
signal.alarm(int(timeout_s))
while True:
    events = os.read(fd, 65536)
    offset = 0
    while offset < len(events):
        _, mask, _, size = struct.unpack_from("iIII", events, offset)
        name = events[offset + 16:offset + 16 + size].rstrip(b"\0").decode()
        offset += 16 + size
        if mask & want and name.startswith(prefix):
            os.kill(int(pid), signal.SIGKILL)
            print(phase)
            sys.exit(0)
EOF

sessions="${work}/sessions"
mkdir -p "${sessions}"
start_edge ref            # the reference: memory only, never killed
ref_addr=${edge_addr}
start_edge crash-0 --sessions "${sessions}"
crash_addr=${edge_addr}
crash_pid=${edge_pid}

declare -A ref_kv ref_ids  # per turn K of the reference: "TOKENS DIGEST", token ids
ref_turns=0
ref_to() {  # runs the reference up to turn K
  while (( ref_turns < $1 )); do
    ref_turns=$(( ref_turns + 1 ))
    turn "${ref_addr}" "${ref_turns}" "${work}/ref-${ref_turns}.json"
    ref_ids[${ref_turns}]=$(token_ids "${work}/ref-${ref_turns}.json")
    ref_kv[${ref_turns}]=$(kv_of "$(session_state "${ref_addr}")")
  done
}
# A completed turn K on the crash edge: same token ids and KV as the reference.
crash_turn() {
  local k=$1 out="${work}/crash-$1.json" state
  ref_to "${k}"
  turn "${crash_addr}" "${k}" "${out}"
  [[ "$(token_ids "${out}")" == "${ref_ids[${k}]}" ]] ||
    fail "turn ${k}: the restored session generated $(token_ids "${out}"); the reference ${ref_ids[${k}]}"
  state=$(session_state "${crash_addr}")
  [[ "${state}" == "${ref_kv[${k}]} True" ]] || fail "after turn ${k}: session ${state}; expected ${ref_kv[${k}]} True"
}

ref_kv[0]="none"  # before turn 1 there is no session
expected_state() {  # what `sessions ls` must show when the session holds turn K
  if (( $1 == 0 )); then echo none; else echo "${ref_kv[$1]} True"; fi
}
done_turns=0   # turns the crash edge's session holds
mid_save=0     # kills that left a temp file behind
phases=(create write close rename)
for round in $(seq 1 "${rounds}"); do
  next=$(( done_turns + 1 ))
  ref_to "${next}"
  phase=${phases[$(( (round - 1) % ${#phases[@]} ))]}
  rm -f "${work}/ready"
  "${python}" "${work}/watch.py" "${sessions}" conv.session.tmp. "${crash_pid}" "${phase}" "${work}/ready" 60 \
    > "${work}/watch.out" 2> "${work}/watch.err" &
  watch_pid=$!
  pids+=("${watch_pid}")
  for _ in $(seq 1 600); do
    [[ -f "${work}/ready" ]] && break
    kill -0 "${watch_pid}" 2> /dev/null || fail "watch.py: $(cat "${work}/watch.err")"
    sleep 0.05
  done
  [[ -f "${work}/ready" ]] || fail "watch.py did not start"
  turn_command "${crash_addr}" "${next}"
  "${turn_cmd[@]}" > "${work}/killed.json" 2> "${work}/killed.err" &
  client_pid=$!
  pids+=("${client_pid}")
  watch_rc=0
  wait "${watch_pid}" || watch_rc=$?
  forget "${watch_pid}"
  (( watch_rc == 0 )) || fail "round ${round}: no save of turn ${next} seen (watch.py exit ${watch_rc}):" \
    "$(cat "${work}/watch.err" "${work}/killed.err")"
  { wait "${crash_pid}" || true; } 2> /dev/null   # dead now: what is on disk is final
  forget "${crash_pid}"
  client_rc=0
  wait "${client_pid}" || client_rc=$?
  forget "${client_pid}"
  temps=("${sessions}"/conv.session.tmp.*)
  left="renamed"
  if (( ${#temps[@]} > 0 )); then
    mid_save=$(( mid_save + 1 ))
    left="temp left ($(stat -c %s "${temps[0]}") bytes)"
  fi

  start_edge "crash-${round}" --sessions "${sessions}"
  crash_addr=${edge_addr}
  crash_pid=${edge_pid}
  temps=("${sessions}"/conv.session.tmp.*)
  (( ${#temps[@]} == 0 )) || fail "round ${round}: stale temp files not removed at start: ${temps[*]}"
  ! grep -qi "refused\|DATA_LOSS" "${work}/crash-${round}.log" ||
    fail "round ${round}: the restarted edge refused a session file"
  state=$(session_state "${crash_addr}")
  if [[ "${state}" == "$(expected_state "${done_turns}")" ]]; then
    holds=${done_turns}
  elif [[ "${state}" == "$(expected_state "${next}")" ]]; then
    holds=${next}
  else
    fail "round ${round}: after kill -9 (${left}) the session is '${state}';" \
      "expected turn ${done_turns} '$(expected_state "${done_turns}")' or ${next} '$(expected_state "${next}")'"
  fi
  [[ "${left}" == renamed ]] || (( holds == done_turns )) ||
    fail "round ${round}: the save's temp file was left, yet the session holds the killed turn"
  (( client_rc != 0 )) || (( holds == next )) ||
    fail "round ${round}: the client received turn ${next} in full, yet the session lost it"
  echo "round ${round}: kill at ${phase}: ${left}; client exit ${client_rc}; session holds turn ${holds}"
  done_turns=${holds}
  # The follow-up works and proves the restored KV: same tokens as the reference.
  crash_turn $(( done_turns + 1 ))
  done_turns=$(( done_turns + 1 ))
done
(( mid_save > 0 )) || fail "none of ${rounds} kills landed while a temp file existed: nothing was proven"
echo "kill -9: ${mid_save} of ${rounds} kills landed mid-save; the session held its last complete turn each time" \
  "(${done_turns} turns, $(session_state "${crash_addr}" | cut -d' ' -f1) tokens)"
kill_edge "${crash_pid}"
echo "session crash: ok"
