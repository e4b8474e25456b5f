#!/usr/bin/env bash
# The one build configuration of both set-up commands, deploy/main-job.sh and
# tests/run-all.sh: the same build folder and the same CMake flags, so the
# command that runs second finds the first one's objects up to date (a
# different flag, such as -Werror on one side only, would change every compile
# command and rebuild everything). Configures build/, then builds the targets
# given, or everything:
#
#   deploy/build.sh                              everything (the test command)
#   deploy/build.sh baton-prefill baton-edge ... only these (the main job)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATON_WERROR=ON
targets=()
for target in "$@"; do targets+=(--target "${target}"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
