#!/usr/bin/env bash
# The three programs as a user runs them: --help everywhere, bad flags give one
# clear line and exit 2, model synth/quantize/info, bench --json, generate.
# usage: cli_tools_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for prog in baton baton-prefill baton-edge; do
  "${bin}/${prog}" --help > "${work}/help.txt" || fail "${prog} --help exited non-zero"
  grep -qi "usage" "${work}/help.txt" || fail "${prog} --help prints no usage"
done

# Bad input: one line on stderr, exit code 2.
set +e
"${bin}/baton" model synth --shape nope -o "${work}/x.gguf" 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "unknown shape exit code ${rc}"
grep -q "unknown shape 'nope'" "${work}/err.txt" || fail "unknown shape message: $(cat "${work}/err.txt")"
set +e
"${bin}/baton" bench decode --model "${work}/missing.gguf" --threads lots 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 2 ]] || fail "bad --threads exit code ${rc}"
grep -q "lots" "${work}/err.txt" || fail "bad --threads message: $(cat "${work}/err.txt")"
set +e
"${bin}/baton" model info "${work}/missing.gguf" 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "missing model exit code ${rc}"
grep -q "missing.gguf" "${work}/err.txt" || fail "missing model message: $(cat "${work}/err.txt")"

# synth -> quantize -> info: the quantized copy keeps the source fingerprint.
"${bin}/baton" model synth --shape tiny --type f16 --seed 3 -o "${work}/tiny-f16.gguf" > /dev/null
"${bin}/baton" model quantize "${work}/tiny-f16.gguf" "${work}/tiny-q4.gguf" --type q4_0 > /dev/null
"${bin}/baton" model info "${work}/tiny-f16.gguf" --json > "${work}/f16.json"
"${bin}/baton" model info "${work}/tiny-q4.gguf" --json > "${work}/q4.json"
fp() { sed -E 's/.*"fingerprint": "([0-9a-f]+)".*/\1/' "$1"; }
[[ -n "$(fp "${work}/f16.json")" ]] || fail "no fingerprint in info --json"
[[ "$(fp "${work}/f16.json")" == "$(fp "${work}/q4.json")" ]] || fail "quantize changed the model fingerprint"
grep -q '"bytes_q4_0": ' "${work}/q4.json" || fail "info lacks bytes by type"
grep -q '"kv_bytes_per_token_f16": 256' "${work}/q4.json" || fail "KV bytes/token: 2 layers x (K+V) x 32 x 2 B = 256 expected"
"${bin}/baton" model synth --shape tiny --type f16 --seed 4 -o "${work}/tiny-other.gguf" > /dev/null
"${bin}/baton" model info "${work}/tiny-other.gguf" --json > "${work}/other.json"
[[ "$(fp "${work}/f16.json")" != "$(fp "${work}/other.json")" ]] || fail "different seeds share a fingerprint"

# verify: the fast engine agrees with the reference engine (q4_0 weights, 8-bit
# activations: well under 5% of the largest logit), and a limit it cannot meet
# fails with exit 1.
"${bin}/baton" model verify "${work}/tiny-q4.gguf" --tokens 10 --json > "${work}/verify.json" \
  || fail "model verify failed on the q4_0 model: $(cat "${work}/verify.json")"
grep -q '"verdict": "ok"' "${work}/verify.json" || fail "verify verdict: $(cat "${work}/verify.json")"
set +e
"${bin}/baton" model verify "${work}/tiny-q4.gguf" --tokens 4 --max-rel-error 0 > "${work}/verify0.txt"; rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "verify with --max-rel-error 0 exited ${rc}, expected 1"

# Benchmarks print JSON with the named figures.
"${bin}/baton" bench decode --model "${work}/tiny-q4.gguf" --context 64 --tokens 8 --json > "${work}/decode.json"
for key in decode_tok_per_s weight_gb_per_s memory_read_gb_per_s ratio_to_bandwidth ratio_to_adjacent_read \
    attention_ms_per_token attention_share_of_step attention_kv_gb_per_s rest_ratio_to_bandwidth; do
  grep -q "\"${key}\": " "${work}/decode.json" || fail "bench decode --json lacks ${key}"
done
# The attention-alone timing ran: a positive time, a share of the step below 1.
grep -Eq '"attention_ms_per_token": 0(\.0*)?[,}]' "${work}/decode.json" && fail "bench decode: attention time is 0"
grep -Eq '"attention_share_of_step": 0\.[0-9]*[1-9]' "${work}/decode.json" ||
  fail "bench decode: attention share not in (0, 1): $(cat "${work}/decode.json")"
"${bin}/baton" bench prefill --model "${work}/tiny-q4.gguf" --tokens 64 --json > "${work}/prefill.json"
grep -q '"prefill_tok_per_s": ' "${work}/prefill.json" || fail "bench prefill --json lacks prefill_tok_per_s"
# The default micro-batch is the runtime's for those weights: quantized the
# edge engine's 64, F16 the cloud CPU backend's 256; --batch overrides it.
grep -q '"batch": 64[,}]' "${work}/prefill.json" || fail "bench prefill, Q4_0: not 64 tokens a batch: $(cat "${work}/prefill.json")"
"${bin}/baton" bench prefill --model "${work}/tiny-f16.gguf" --tokens 32 --json > "${work}/prefill-f16.json"
grep -q '"batch": 256[,}]' "${work}/prefill-f16.json" ||
  fail "bench prefill, F16: not 256 tokens a batch: $(cat "${work}/prefill-f16.json")"
"${bin}/baton" bench prefill --model "${work}/tiny-f16.gguf" --tokens 32 --batch 16 --json > "${work}/prefill-f16.json"
grep -q '"batch": 16[,}]' "${work}/prefill-f16.json" || fail "bench prefill --batch 16 not held"

# Generate: greedy output is reproducible; stats are printed.
"${bin}/baton" generate --model "${work}/tiny-q4.gguf" --prompt-len 20 --max-tokens 12 --temperature 0 --json > "${work}/g1.txt"
"${bin}/baton" generate --model "${work}/tiny-q4.gguf" --prompt-len 20 --max-tokens 12 --temperature 0 --json > "${work}/g2.txt"
head -1 "${work}/g1.txt" > "${work}/t1.txt"
head -1 "${work}/g2.txt" > "${work}/t2.txt"
cmp -s "${work}/t1.txt" "${work}/t2.txt" || fail "greedy generation is not reproducible"
grep -q '"generated_tokens": 12' "${work}/g1.txt" || fail "generate stats: $(cat "${work}/g1.txt")"
echo "cli tools: ok"
