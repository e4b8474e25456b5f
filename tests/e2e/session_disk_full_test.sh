#!/usr/bin/env bash
# Session durability of baton-edge when the disk fills up (a real process,
# the bundled tiny model, loopback ports read from the logs; the kill -9
# faults are session_crash_test.sh). Needs mount(2) (root): skipped otherwise
# (exit 77: ctest shows it skipped).
# The sessions live on a small tmpfs that is then filled. Contract (today's
# code: SessionLease::commit and SessionStore::commit): a turn whose save
# fails still completes for its client (it got its text and stats, and
# Stats.save_error says the turn is in memory only, with the ENOSPC); the
# session stays in memory, `sessions ls` shows it not persisted, and the
# edge logs the RESOURCE_EXHAUSTED error (ENOSPC); the previous file stays
# byte for byte, no temp file is left, and a restart restores the previous
# turn. Once space is freed the next turn saves, and a restart restores that
# one.
# usage: session_disk_full_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
mnt=""  # the tmpfs while mounted
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cleanup_signal=KILL
cleanup_hook() {
  if [[ -n "${mnt}" ]]; then umount "${mnt}" 2> /dev/null || umount -l "${mnt}" 2> /dev/null || true; fi
}
# shellcheck source-path=SCRIPTDIR source=session_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/session_lib.sh"
shopt -s nullglob

mkdir -p "${work}/tmpfs"
mount -t tmpfs -o size=1024k,mode=0700 tmpfs "${work}/tmpfs" 2> "${work}/mount.err" ||
  skip "disk full: cannot mount a tmpfs (needs root): $(head -1 "${work}/mount.err")"
mnt="${work}/tmpfs"
full="${mnt}/sessions"
mkdir -m 0700 "${full}"
start_edge full-0 --sessions "${full}"
full_addr=${edge_addr}
full_pid=${edge_pid}
# Turn 1: a short first turn, saved.
full_turn() {  # full_turn K: a completed turn on the tmpfs edge, its state
  local k=$1
  "${baton}" generate --edge "${full_addr}" --session conv --policy local --temperature 0 --max-tokens 16 \
    -p "$(head -c $(( 200 * k )) "${held_out}" | tail -c 200)" --timeout 60s --json \
    > "${work}/full-${k}.json" 2> "${work}/full-${k}.err" || fail "disk full: turn ${k}: $(cat "${work}/full-${k}.err")"
  "${python}" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["token_ids"] and d["stats"]["finish_reason"]' \
    "${work}/full-${k}.json" || fail "disk full: turn ${k} did not complete: $(cat "${work}/full-${k}.json")"
}
full_turn 1
state1=$(session_state "${full_addr}")
[[ "${state1}" == *" True" ]] || fail "disk full: turn 1 not saved: ${state1}"
sum1=$(sha256sum < "${full}/conv.session")
# Fill the tmpfs: the next save cannot fit (dd stops at ENOSPC).
dd if=/dev/zero of="${mnt}/filler" bs=4k 2> /dev/null || true
(( $(df --output=avail -k "${mnt}" | tail -1) == 0 )) || fail "disk full: the tmpfs is not full: $(df -k "${mnt}")"
full_turn 2
state2=$(session_state "${full_addr}")
[[ "${state2}" == *" False" ]] || fail "disk full: turn 2 reported saved on a full disk: ${state2}"
[[ "$(kv_of "${state2}")" != "$(kv_of "${state1}")" ]] || fail "disk full: turn 2 did not change the session in memory"
grep -q "RESOURCE_EXHAUSTED.*No space left on device" "${work}/full-0.log" ||
  fail "disk full: the edge did not report the failed save as RESOURCE_EXHAUSTED / ENOSPC"
save_error=$(json_get "${work}/full-2.json" 'd["stats"].get("save_error", "")')
[[ "${save_error}" == *"memory only"*"No space left on device"* ]] ||
  fail "disk full: the client was not told its turn is unsaved: '${save_error}'"
[[ -z "$(json_get "${work}/full-1.json" 'd["stats"].get("save_error", "")')" ]] ||
  fail "disk full: turn 1 (saved) reported a save error"
[[ "$(sha256sum < "${full}/conv.session")" == "${sum1}" ]] || fail "disk full: the previous session file changed"
temps=("${full}"/*.tmp.*)
(( ${#temps[@]} == 0 )) || fail "disk full: temp files left: ${temps[*]}"
# A crash now loses only the unsaved turn: the previous file restores.
kill_edge "${full_pid}"
start_edge full-1 --sessions "${full}"
full_addr=${edge_addr}
full_pid=${edge_pid}
[[ "$(session_state "${full_addr}")" == "${state1}" ]] ||
  fail "disk full: after a restart the session is '$(session_state "${full_addr}")', expected turn 1 '${state1}'"
# Space freed: the same turn 2 again (greedy: same KV) now saves, and a
# restart restores it.
rm -f "${mnt}/filler"
full_turn 2
[[ "$(session_state "${full_addr}")" == "$(kv_of "${state2}") True" ]] ||
  fail "disk full: turn 2 after freeing space: '$(session_state "${full_addr}")', expected '$(kv_of "${state2}") True'"
kill_edge "${full_pid}"
start_edge full-2 --sessions "${full}"
full_addr=${edge_addr}
full_pid=${edge_pid}
[[ "$(session_state "${full_addr}")" == "$(kv_of "${state2}") True" ]] ||
  fail "disk full: after a restart the session is '$(session_state "${full_addr}")', expected turn 2"
full_turn 3
[[ "$(session_state "${full_addr}")" == *" True" ]] || fail "disk full: turn 3 not saved"
! grep -qi "refused\|DATA_LOSS" "${work}"/full-*.log || fail "disk full: a session file was refused"
kill_edge "${full_pid}"
echo "disk full: the turn completed and said it was not saved (${save_error}); the previous file stayed intact"
echo "session disk full: ok"
