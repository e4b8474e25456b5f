#!/usr/bin/env bash
# The main job: installs the dependencies, builds, and runs Baton's CPU engine
#  1. on the bundled tiny model (Q4_0 copy derived at build time): a prompt of
#     held-out KJV text, generated text streamed, then the stats;
#  2. on a synthetic model of the Llama-3.2-1B shape (Q4_0): a 512-token
#     prompt, 32 tokens, the stats (speed at a real shape).
# The cloud + edge flow over gRPC replaces step 1 once the services land.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
threads=$(nproc)

echo "== bundled tiny model: baton-tiny-kjv (Q4_0) =="
prompt=$(head -n 12 deploy/models/baton-tiny-kjv.heldout.txt | tr '\n' ' ')
build/bin/baton generate --model build/models/baton-tiny-kjv-q4_0.gguf -p "${prompt}" \
  --max-tokens 64 --temperature 0.8 --top-k 40 --seed 1 --threads "${threads}"

echo "== synthetic llama-3.2-1b shape (Q4_0): speed =="
model=build/models/llama-3.2-1b-q4_0.gguf
if [[ ! -f "${model}" ]]; then
  build/bin/baton model synth --shape llama-3.2-1b --type q4_0 --seed 1 -o "${model}"
fi
build/bin/baton generate --model "${model}" --prompt-len 512 --max-tokens 32 --threads "${threads}" | tail -6  # random weights: the text is noise, the stats are the point
