#!/usr/bin/env bash
# Issue 20, the transform KV codec between real processes: the bundled model
# calibrated with `baton model calibrate`, baton-prefill serving it with
# --kv-calibration, baton-edge with --codec tc-b2 and NO calibration file
# (it fetches the cloud's over GetKvCalibration), then:
#   - `baton health --cloud` names the calibration's SHA-256;
#   - a long prompt through the CLI with --policy cloud: the stats name the
#     wire codec tc-b2, and its KV on the wire is below an int8 run's of the
#     same prompt (--codec int8);
#   - an edge given a calibration of other text refuses the turn with an
#     error naming tc_calibration;
#   - baton-prefill refuses to start with a calibration of another model.
# usage: transform_codec_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models
baton="${bin}/baton"
chapter="${src}/deploy/examples/chapter.txt"

# --- calibrations ------------------------------------------------------------
"${baton}" model calibrate --model "${cloud_model}" --text-file "${chapter}" -o "${work}/c.batoncal" \
  > "${work}/calibrate.out" 2>&1 || fail "model calibrate: $(cat "${work}/calibrate.out")"
cat "${src}/deploy/examples/system.txt" "${chapter}" > "${work}/other.txt"
"${baton}" model calibrate --model "${cloud_model}" --text-file "${work}/other.txt" -o "${work}/other.batoncal" \
  > "${work}/calibrate-other.out" 2>&1 || fail "model calibrate (other): $(cat "${work}/calibrate-other.out")"
sha=$("${python}" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' \
  "${work}/c.batoncal")

# --- a calibration of another model is refused at start ------------------------
other_model="${work}/other-model.gguf"
"${baton}" model synth --shape tiny -o "${other_model}" > /dev/null 2>&1 ||
  { echo "NOTE: baton model synth failed; the other-model start check is left out"; other_model=""; }
if [[ -n "${other_model}" ]]; then
  if "${bin}/baton-prefill" --model "${other_model}" --listen 127.0.0.1:0 --threads 1 \
    --kv-calibration "${work}/c.batoncal" > "${work}/refused-start.out" 2>&1; then
    fail "baton-prefill started with a calibration of another model"
  fi
  grep -q -- "--kv-calibration" "${work}/refused-start.out" ||
    fail "refused start does not name --kv-calibration: $(cat "${work}/refused-start.out")"
fi

# --- cloud and edge ------------------------------------------------------------
start_server prefill '.*listening on port \([0-9]*\).*' \
  "${bin}/baton-prefill" --model "${cloud_model}" --listen 127.0.0.1:0 --threads 2 \
  --kv-calibration "${work}/c.batoncal"
cloud="127.0.0.1:${server_port}"
start_server edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --threads 2 --codec tc-b2
edge="127.0.0.1:${server_port}"
"${baton}" health --cloud "${cloud}" --wait 120s > "${work}/cloud-health.txt" || fail "cloud not READY"
"${baton}" health --edge "${edge}" --wait 120s > /dev/null || fail "edge not READY"
grep -q "${sha}" "${work}/cloud-health.txt" ||
  fail "cloud health does not name the calibration ${sha}: $(cat "${work}/cloud-health.txt")"

run() {  # run NAME ARGS...: a long prompt through the cloud, --json into NAME.json
  local name=$1
  shift
  timeout 300 "${baton}" generate --edge "${1}" --prompt-file "${chapter}" --max-tokens 8 --temperature 0 \
    --policy cloud --json "${@:2}" > "${work}/${name}.json" 2> "${work}/${name}.err"
}
run tc "${edge}" || fail "generate with tc-b2: $(cat "${work}/tc.err")"
run int8 "${edge}" --codec int8 || fail "generate with int8: $(cat "${work}/int8.err")"
[[ $(json_get "${work}/tc.json" 'd["stats"]["kv_codec"]') == tc-b2 ]] ||
  fail "the tc turn's stats name codec $(json_get "${work}/tc.json" 'd["stats"].get("kv_codec")')"
[[ $(json_get "${work}/tc.json" 'd["stats"]["plan"]["place"]') == PREFILL_PLACE_CLOUD ]] || fail "tc: place"
tc_wire=$(json_get "${work}/tc.json" 'int(d["stats"]["kv_wire_bytes"])')
int8_wire=$(json_get "${work}/int8.json" 'int(d["stats"]["kv_wire_bytes"])')
prompt_tokens=$(json_get "${work}/tc.json" 'd["stats"]["prompt_tokens"]')
(( prompt_tokens > 300 )) || fail "the long prompt has only ${prompt_tokens} tokens"
(( tc_wire > 0 && tc_wire < int8_wire )) || fail "tc-b2 wire bytes ${tc_wire} not below int8's ${int8_wire}"
echo "wire bytes for ${prompt_tokens} prompt tokens: tc-b2 ${tc_wire}, int8 ${int8_wire}"
# The table on stderr names the codec too.
timeout 300 "${baton}" generate --edge "${edge}" --prompt-file "${chapter}" --max-tokens 2 --policy cloud \
  > /dev/null 2> "${work}/table.err" || fail "generate (table): $(cat "${work}/table.err")"
grep -q "tc-b2" "${work}/table.err" || fail "stats table lacks the codec: $(cat "${work}/table.err")"

# --- an edge with another calibration ------------------------------------------
start_server edge-other '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${model}" --listen 127.0.0.1:0 --cloud "${cloud}" --threads 2 --codec tc-b2 \
  --kv-calibration "${work}/other.batoncal"
edge_other="127.0.0.1:${server_port}"
"${baton}" health --edge "${edge_other}" --wait 120s > /dev/null || fail "edge (other calibration) not READY"
if run other "${edge_other}"; then fail "an edge with another calibration was served: $(cat "${work}/other.json")"; fi
grep -q "tc_calibration" "${work}/other.err" || fail "the refusal does not name tc_calibration: $(cat "${work}/other.err")"
echo "PASS"
