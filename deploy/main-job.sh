#!/usr/bin/env bash
# The main job: installs the dependencies, builds, and runs Baton's CPU engine
# on a synthetic model of the Llama-3.2-1B shape (Q4_0 weights): a 512-token
# prompt, 32 generated tokens, and the stats. Later steps of the project turn
# this into the cloud + edge flow over gRPC with the bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
model=build/models/llama-3.2-1b-q4_0.gguf
mkdir -p build/models
if [[ ! -f "${model}" ]]; then
  build/bin/baton model synth --shape llama-3.2-1b --type q4_0 --seed 1 -o "${model}"
fi
build/bin/baton model info "${model}"
build/bin/baton generate --model "${model}" --prompt-len 512 --max-tokens 32 --threads "$(nproc)"
