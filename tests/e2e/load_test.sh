#!/usr/bin/env bash
# Load test of one edge agent and one cloud on loopback (issue 9), small and
# bounded: `baton bench load` with 4 clients x 3 sessions x 2 turns against
# baton-edge (with baton-prefill behind it) on a memory budget that leaves KV
# room for 320 int4 tokens, so
#   - sessions are evicted from memory to disk (the KV budget holds one or two
#     of them), and
#   - turns whose session would pass 320 tokens are refused by admission
#     control with RESOURCE_EXHAUSTED and a message giving the numbers
#     (--context-overflow refuse: the default, truncate, would drop the
#     sessions' first turns instead, and the tool checks every session holds
#     all its turns);
#   - the four clients queue on the agent's one generation worker
#     (--max-batch 1: with turns running at once, each holds its KV
#     reservation and a cloud stream's staging finds even less of this tiny
#     budget free, so fewer sessions would complete than the checks need).
# Asserts: completed + failed == sent; only RESOURCE_EXHAUSTED as an error;
# nothing lost (the tool's check: every complete session listed with the token
# count its turns imply and the prefix digest of the tokens sent and received);
# the KV held by sessions (the agent's Health, polled) never above the KV
# budget; the edge's peak resident memory below the configured cap; the same
# sessions with the same token counts after the edge restarts. Then the check
# itself is shown to fail: an agent that keeps one session in memory and none
# on disk loses sessions, and the tool exits 1 naming them.
# usage: load_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"
started_at=${SECONDS}

# The memory budget: the plan's weights and scratch, the 64 MiB headroom
# (kMinHeadroomBytes: larger than 5% of a budget this small) and KV for 320
# tokens of the default int4 codec. `baton plan` gives the first two and the
# KV bytes per token.
"${baton}" plan --model "${model}" --memory 1GiB --json > "${work}/plan.json" || fail "baton plan"
read -r budget kv_per_token < <("${python}" - "${work}/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
per_token = next(c["kv_bytes_per_token"] for c in plan["codecs"] if c["codec"].startswith("int4-pc"))
print(plan["weights_bytes"] + plan["scratch_bytes"] + (64 << 20) + 320 * per_token, per_token)
EOF
)

start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${model}" --listen 127.0.0.1:0 --threads 1
cloud="127.0.0.1:${server_port}"
cloud_pid=${server_pid}
start_edge() {  # start_edge LOG_NAME
  start_server "$1" '.*listening on [^:]*:\([0-9]*\).*' \
    "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --threads 1 --max-batch 1 \
    --sessions "${work}/sessions" --memory-budget "${budget}" --context-overflow refuse
  edge="127.0.0.1:${server_port}"
  edge_pid=${server_pid}
  "${baton}" health --edge "${edge}" --wait 60s > /dev/null || fail "edge not READY"
}
start_edge edge
"${baton}" health --cloud "${cloud}" --wait 60s > /dev/null || fail "cloud not READY"

# Policy cloud, so the KV of every turn crosses the handoff under load.
# Prompt lengths, round robin over (client, session, turn): sessions of
# 24+48, 48+96, 96+160 tokens fit 320; 160+340 is refused at its second turn,
# 340+24 at its first (its second turn is then skipped). A turn whose cloud
# KV does not fit the budget left next to its session (the staging, counted
# at the stream's header) is refused too.
"${baton}" bench load --edge "${edge}" --clients 4 --sessions-per-client 3 --turns 2 \
  --prompt-tokens 24,48,96,160,340 --max-tokens 8 --policy cloud --seed 3 \
  --deadline-ms 30000 --duration-s 45 --edge-pid "${edge_pid}" --cloud-pid "${cloud_pid}" --json \
  > "${work}/load.json" 2> "${work}/load.err" || fail "bench load: $(cat "${work}/load.err")"

"${python}" - "${work}/load.json" "${budget}" "${kv_per_token}" <<'EOF' || fail "load figures: $(cat "${work}/load.json")"
import json, sys
d = json.load(open(sys.argv[1]))
budget, kv_per_token = int(sys.argv[2]), int(sys.argv[3])
sent, done, failed = d["requests_sent"], d["requests_completed"], d["requests_failed"]
assert sent > 0 and done > 0, (sent, done)
assert done + failed == sent, ("completed + failed != sent", done, failed, sent)
# 24 turns planned; a session stops at its first refusal, so its later turns are skipped.
assert sent + d["turns_skipped"] == 4 * 3 * 2, (sent, d["turns_skipped"])
errors = d["errors"]
assert set(errors) <= {"RESOURCE_EXHAUSTED"}, ("unexpected status codes", errors)
assert errors.get("RESOURCE_EXHAUSTED", {}).get("count", 0) > 0, "no turn was refused by admission control"
# Refused by the context cap, or at the cloud stream's header because its
# staging does not fit the KV budget left next to the session (issue 15).
sample = errors["RESOURCE_EXHAUSTED"]["sample"]
assert "this device fits 320" in sample or "of the KV memory budget are free" in sample, errors
# Policy cloud: every prefill (and so every session file) holds KV the cloud computed.
assert d["prefill_places"] == {"cloud": done}, d["prefill_places"]
assert d["ttft_ms"]["count"] == done and 0 < d["ttft_ms"]["p50"] <= d["ttft_ms"]["p99"] <= d["ttft_ms"]["max"], d["ttft_ms"]
assert d["tokens_generated"] > 0
# Nothing lost, and the memory pressure was real: complete sessions were evicted to disk.
assert d["nothing_lost"] and d["sessions_lost"] == 0, d["sessions"]
assert d["sessions_complete"] >= 6, d["sessions_complete"]
assert len(d["sessions"]) == d["sessions_complete"]
evicted = [s for s in d["sessions"] if s["persisted"] and not s["in_memory"]]
assert evicted, ("no complete session was evicted to disk", d["sessions"])
plan = d["edge_memory_plan"]
assert plan["device_limit_bytes"] == budget, plan
assert plan["kv_budget_bytes"] == 320 * kv_per_token, plan
# Admission control: the KV that sessions hold in memory never passed the KV budget.
agent = d["agent"]
assert agent["health_samples"] > 0 and agent["max_kv_used_bytes"] <= plan["kv_budget_bytes"], agent
# The whole process under the cap. The budget is weights + scratch + headroom
# (>= 64 MiB, for code, gRPC and allocator slack) + KV; admission holds the
# KV of idle sessions under the KV budget, and the one turn computing at a
# time adds at most one session's KV (<= max context x bytes per token = the
# KV budget again), which the headroom covers. So the peak resident set of
# the edge since it started (VmHWM: mapped weights, libraries, every thread)
# must stay below the budget itself; nothing extra is allowed for.
edge = d["edge_memory"]
assert edge and edge["samples"] > 0 and not edge["exited"], edge
# Under a sanitizer (tests/run-sanitized.sh sets BATON_SANITIZER) shadow
# memory and quarantines inflate every process: the bound does not apply.
import os
if os.environ.get("BATON_SANITIZER"):
    print(f"NOTE: {os.environ['BATON_SANITIZER']} build: edge peak memory {edge['vm_hwm_bytes']} B not held to the cap")
else:
    assert 0 < edge["vm_hwm_bytes"] <= budget, ("edge peak resident memory above the cap", edge["vm_hwm_bytes"], budget)
assert d["cloud_memory"] and d["cloud_memory"]["vm_hwm_bytes"] > 0, d["cloud_memory"]
EOF

# The agent restarted: every complete session is still there with the same tokens.
stop_server "${edge_pid}"
start_edge edge-restarted
"${baton}" sessions ls --edge "${edge}" --json > "${work}/after.json" || fail "sessions ls after the restart"
"${python}" - "${work}/load.json" "${work}/after.json" <<'EOF' || fail "sessions after the restart: $(cat "${work}/after.json")"
import json, sys
load, after = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
listed = {s["session_id"]: s["token_count"] for s in after.get("sessions", [])}
for s in load["sessions"]:
    assert listed.get(s["id"]) == s["expected_tokens"], (s["id"], listed.get(s["id"]), s["expected_tokens"])
EOF
# The same session ids again would continue those sessions: refused.
set +e
"${baton}" bench load --edge "${edge}" --clients 1 --sessions-per-client 1 --turns 1 --seed 3 \
  > /dev/null 2> "${work}/again.err"
rc=$?
set -e
if [[ ${rc} -ne 1 ]] || ! grep -q "already exists" "${work}/again.err"; then
  fail "a second run on existing session ids: exit ${rc}: $(cat "${work}/again.err")"
fi

# The check can fail: an agent with no session directory and one session in
# memory drops sessions; the tool names them and exits 1.
start_server lossy '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 1 --max-sessions 1
lossy="127.0.0.1:${server_port}"
"${baton}" health --edge "${lossy}" --wait 60s > /dev/null || fail "lossy edge not READY"
set +e
"${baton}" bench load --edge "${lossy}" --clients 1 --sessions-per-client 3 --turns 1 --prompt-tokens 16 \
  --max-tokens 4 > "${work}/lossy.txt" 2> "${work}/lossy.err"
rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "bench load against a lossy agent exited ${rc}: $(cat "${work}/lossy.txt" "${work}/lossy.err")"
grep -q "load-c0-s0: not listed by the agent" "${work}/lossy.txt" || fail "lossy: $(cat "${work}/lossy.txt")"

# A full queue: with --max-batch 1 --max-queued 1, six clients at once
# overrun the one running and one waiting slot; the rest are refused at once
# with the limit and a retry hint, and nothing already completed is lost.
start_server queue1 '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --threads 1 --max-batch 1 --max-queued 1 \
  --sessions "${work}/sessions-q1"
queue1="127.0.0.1:${server_port}"
"${baton}" health --edge "${queue1}" --wait 60s > /dev/null || fail "queue1 edge not READY"
"${baton}" bench load --edge "${queue1}" --clients 6 --sessions-per-client 1 --turns 2 --prompt-tokens 64 \
  --max-tokens 32 --json > "${work}/queue1.json" 2> "${work}/queue1.err" ||
  fail "bench load against --max-queued 1: $(cat "${work}/queue1.err")"
"${python}" - "${work}/queue1.json" <<'EOF' || fail "queue full: $(cat "${work}/queue1.json")"
import json, sys
d = json.load(open(sys.argv[1]))
errors = d["errors"]
assert set(errors) == {"RESOURCE_EXHAUSTED"}, errors
assert "1 Generate calls are already waiting (the limit)" in errors["RESOURCE_EXHAUSTED"]["sample"], errors
assert d["requests_completed"] >= 2 and d["requests_completed"] + d["requests_failed"] == d["requests_sent"], d
assert d["nothing_lost"] and d["sessions_lost"] == 0, d["sessions"]
EOF

# Usage errors.
for args in "--clients 0" "--prompt-tokens 8 --prompt-words 8" "--policy sideways" "--prompt-tokens 0"; do
  set +e
  # shellcheck disable=SC2086  # the flags are meant to split
  "${baton}" bench load --edge "${edge}" ${args} > /dev/null 2> "${work}/usage.err"
  rc=$?
  set -e
  [[ ${rc} -eq 2 ]] || fail "bench load ${args}: exit ${rc}: $(cat "${work}/usage.err")"
done
echo "load: ok ($((SECONDS - started_at)) s)"
