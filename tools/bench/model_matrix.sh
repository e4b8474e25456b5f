#!/usr/bin/env bash
# The architecture x weight-type table: for each synthetic shape (seeded
# weights of a real model's shape) and each weight type, whether Baton runs
# it, the fast engine's max logit error against the golden reference engine
# (`baton model verify`), and decode speed with the fraction of the memory
# read bandwidth measured in the same run (`baton bench decode`).
#
# usage: tools/bench/model_matrix.sh [--shapes a,b,...] [--types f16,q8_0,...]
#                              [--context 512] [--threads 2] [--dir DIR]
# Prints a Markdown table on stdout; progress on stderr. Synthetic weights:
# speed and agreement are real, the text is not (no pretrained weights here).
set -euo pipefail

bin=${BATON_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
shapes="llama-3.2-1b,qwen2.5-1.5b,qwen3-1.7b,gemma-3-1b,phi-4-mini"
types="f16,q8_0,q4_0,q4_k_m,q5_k_m,q6_k"
context=512
threads=2
dir=""
verify_tokens=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --verify-tokens) verify_tokens=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "model_matrix.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$dir" ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"

field() {  # field JSON_FILE KEY -> value or "-"
  /usr/bin/python3 -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("-"); sys.exit()
for k in sys.argv[2].split("."):
    d = d[int(k)] if isinstance(d, list) else d.get(k) if isinstance(d, dict) else None
    if d is None: break
print("-" if d is None else (f"{d:.3g}" if isinstance(d, float) else d))' "$1" "$2"
}

echo "| shape | arch | weights | runs | max rel. logit error vs reference | max abs error | decode tok/s (ctx $context, f16 KV) | fraction of read bandwidth |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
IFS=, read -r -a shape_list <<< "$shapes"
IFS=, read -r -a type_list <<< "$types"
for shape in "${shape_list[@]}"; do
  src="$dir/$shape-f16.gguf"
  echo "== $shape: synth f16" >&2
  if ! "$bin/baton" model synth --shape "$shape" --type f16 --seed 0 -o "$src" --threads "$threads" >&2; then
    echo "| $shape | - | - | no: synth failed | | | | |"
    continue
  fi
  arch=$("$bin/baton" model info "$src" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["architecture"])')
  for type in "${type_list[@]}"; do
    model="$src"
    if [[ "$type" != f16 ]]; then
      model="$dir/$shape-$type.gguf"
      echo "== $shape: quantize $type" >&2
      if ! "$bin/baton" model quantize "$src" "$model" --type "$type" --threads "$threads" >&2; then
        echo "| $shape | $arch | $type | no: quantize failed | | | | |"
        continue
      fi
    fi
    echo "== $shape $type: verify, decode" >&2
    runs=yes
    "$bin/baton" model verify "$model" --tokens "$verify_tokens" --threads "$threads" --json \
      > "$dir/verify.json" 2>&1 || runs="no (verify exit $?)"
    "$bin/baton" bench decode --model "$model" --context "$context" --kv f16 --tokens 8 \
      --threads "$threads" --json > "$dir/decode.json" 2>&1 || runs="$runs; decode failed"
    echo "| $shape | $arch | $type | $runs | $(field "$dir/verify.json" max_rel_error) |" \
         "$(field "$dir/verify.json" max_abs_diff) | $(field "$dir/decode.json" rows.0.decode_tok_per_s) |" \
         "$(field "$dir/decode.json" rows.0.ratio_to_bandwidth) |"
    [[ "$model" != "$src" ]] && rm -f "$model"
  done
  rm -f "$src"
done
