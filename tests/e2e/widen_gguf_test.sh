#!/usr/bin/env bash
# tools/train/widen_gguf.py: the widened model (wider embedding and FFN,
# added heads and zero layers) computes what the original does (the memory-bound stand-in for speculative decoding's figures). The
# NumPy reference (tests/tools/gguf_numpy_reference.py, float64) runs both
# GGUFs; their logits must agree to float rounding, and Baton's engine must
# load the widened shape (key_length set, width no longer n_head x head_dim).
# usage: widen_gguf_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundled_models

"${python}" "${src}/tools/train/widen_gguf.py" "${cloud_model}" "${work}/wide.gguf" --embd 512 --ff 1024 \
  --heads 16 --kv-heads 4 --layers 8 \
  > "${work}/widen.log" 2>&1 || fail "widen_gguf.py failed: $(cat "${work}/widen.log")"
"${bin}/baton" model info "${work}/wide.gguf" > "${work}/info.txt"
grep -Eq "embedding width +512" "${work}/info.txt" || fail "widened width: $(cat "${work}/info.txt")"
grep -Eq "ffn width +1024" "${work}/info.txt" || fail "widened ffn: $(cat "${work}/info.txt")"
grep -Eq "layers +8" "${work}/info.txt" || fail "deepened layers: $(cat "${work}/info.txt")"
grep -Eq "query heads +16" "${work}/info.txt" && grep -Eq "key/value heads +4" "${work}/info.txt" ||
  fail "added heads: $(cat "${work}/info.txt")"

# A narrower target is refused.
set +e
"${python}" "${src}/tools/train/widen_gguf.py" "${cloud_model}" "${work}/bad.gguf" --embd 128 --ff 1024 \
  2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -ne 0 ]] || fail "a narrower --embd was accepted"
grep -q "must be >=" "${work}/err.txt" || fail "narrower --embd message: $(cat "${work}/err.txt")"
# Heads that would change which KV head an original query head reads are refused.
set +e
"${python}" "${src}/tools/train/widen_gguf.py" "${cloud_model}" "${work}/bad.gguf" --embd 512 --ff 1024 \
  --heads 16 --kv-heads 8 2> "${work}/err.txt"; rc=$?
set -e
[[ ${rc} -ne 0 ]] || fail "a different query-heads-per-KV-head ratio was accepted"
grep -q "query heads per KV head" "${work}/err.txt" || fail "heads ratio message: $(cat "${work}/err.txt")"

PYTHONPATH="${src}/tests/tools" "${python}" - "${cloud_model}" "${work}/wide.gguf" <<'PY' || fail "widened logits differ"
import sys
import numpy as np
import gguf_numpy_reference as ref
tokens = [1, 57, 300, 7, 901, 12, 2048, 33]
a = ref.compute_logits(sys.argv[1], tokens)
b = ref.compute_logits(sys.argv[2], tokens)
err = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
print("max |logit difference| / max |logit| = %.3g" % err)
sys.exit(0 if err < 1e-5 and np.array_equal(a.argmax(-1), b.argmax(-1)) else 1)
PY

# Baton's engine runs it: quantized, its greedy tokens are the original's
# (the same Q4_0 blocks, plus all-zero ones).
"${bin}/baton" model quantize "${cloud_model}" "${work}/orig-q4_0.gguf" --type q4_0 > /dev/null
"${bin}/baton" model quantize "${work}/wide.gguf" "${work}/wide-q4_0.gguf" --type q4_0 > /dev/null
for m in orig wide; do
  "${bin}/baton" generate --model "${work}/${m}-q4_0.gguf" --prompt-tokens 1,57,300,7,901 --max-tokens 8 \
    --temperature 0 > "${work}/${m}.out" 2> "${work}/${m}.err" || fail "generate on ${m}: $(cat "${work}/${m}.err")"
  sed '/^stats (/,$d' "${work}/${m}.out" > "${work}/${m}.txt"  # the reply, without the stats block
done
[[ -s "${work}/orig.txt" ]] || fail "the original model generated nothing"
cmp -s "${work}/orig.txt" "${work}/wide.txt" ||
  fail "greedy text differs: original '$(cat "${work}/orig.txt")', widened '$(cat "${work}/wide.txt")'"
# tools/train/truncate_gguf.py (the layer-skip self-draft): the first 4 layers
# load and run, and a draft model made of them keeps the model's reply.
"${python}" "${src}/tools/train/truncate_gguf.py" "${cloud_model}" "${work}/cut.gguf" --layers 4 \
  > "${work}/cut.log" 2>&1 || fail "truncate_gguf.py failed: $(cat "${work}/cut.log")"
"${bin}/baton" model info "${work}/cut.gguf" > "${work}/cut-info.txt"
grep -Eq "^ +layers +4$" "${work}/cut-info.txt" || fail "truncated layers: $(cat "${work}/cut-info.txt")"
set +e
"${python}" "${src}/tools/train/truncate_gguf.py" "${cloud_model}" "${work}/bad.gguf" --layers 7 2> "${work}/err.txt"
rc=$?
set -e
[[ ${rc} -ne 0 ]] || fail "--layers past the model's was accepted"
grep -q "must be in \[1, 6\]" "${work}/err.txt" || fail "--layers 7 message: $(cat "${work}/err.txt")"
"${bin}/baton" bench decode --speculative 4 --model "${work}/orig-q4_0.gguf" --draft "${work}/cut.gguf" --task free \
  --tokens 16 --prompts 1 --text-file "${src}/deploy/models/baton-tiny-kjv.heldout.txt" > "${work}/draft.txt" 2>&1 || fail "bench with the truncated draft: $(cat "${work}/draft.txt")"
grep -q "draft model .*-4l" "${work}/draft.txt" || fail "the bench did not draft with it: $(cat "${work}/draft.txt")"

echo "PASS widen_gguf: logits agree, greedy text: $(head -c 80 "${work}/wide.txt")"
