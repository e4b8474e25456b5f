# shellcheck shell=bash disable=SC2034,SC2154  # sourced: variables come from lib.sh and the scripts, or are for them
# Shared by session_crash_test.sh and session_disk_full_test.sh (sourced after
# lib.sh, with bin and src set; not a test: no _test.sh suffix). Sets model
# (the bundled tiny model, checked to exist), baton (the CLI) and held_out
# (held-out text for prompts); defines start_edge, kill_edge, session_state
# and kv_of below.
baton="${bin}/baton"
bundled_models
held_out="${heldout}"

# Starts baton-edge and waits until it is READY.
# start_edge LOG_NAME FLAGS...; sets edge_addr and edge_pid.
start_edge() {
  local name=$1
  shift
  start_server "${name}" '.*listening on [^:]*:\([0-9]*\).*' \
    "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 2 --codec f16 "$@"
  edge_pid=${server_pid}
  edge_addr="127.0.0.1:${server_port}"
  "${baton}" health --edge "${edge_addr}" --wait 60s > /dev/null || fail "${name} not READY"
}

# kill -9 and reap.
kill_edge() { stop_server "$1" KILL; }

# What `sessions ls` says of session `conv`: "TOKENS DIGEST PERSISTED", or "none".
session_state() {
  "${baton}" sessions ls --edge "$1" --json > "${work}/ls.json" || fail "sessions ls --edge $1"
  "${python}" - "${work}/ls.json" << 'EOF'
import json, sys
rows = [s for s in json.load(open(sys.argv[1])).get("sessions", []) if s["session_id"] == "conv"]
print(" ".join(str(x) for x in (rows[0]["token_count"], rows[0]["prefix_digest"], rows[0].get("persisted", False)))
      if rows else "none")
EOF
}
# The TOKENS DIGEST part of a state (what must match between edges).
kv_of() { echo "${1% *}"; }
