#!/usr/bin/env bash
# Installs the dependencies, builds everything (CUDA too when nvcc is found)
# and runs the whole test suite with ctest. .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATON_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
