#!/usr/bin/env bash
# Builds the whole test suite under a sanitizer and runs it.
#   tests/run-sanitized.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer -> build-asan/
#   tests/run-sanitized.sh tsan   # ThreadSanitizer -> build-tsan/
# No -Werror here: GCC's -Wmaybe-uninitialized is noisy under sanitizer
# instrumentation; the regular build keeps warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "${mode}" in
  asan) sanitize="address,undefined"; dir=build-asan
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
        export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} ;;
  tsan) sanitize="thread"; dir=build-tsan
        # Suppressions cover only the uninstrumented Debian gRPC/Abseil libraries.
        export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp} ;;
  *) echo "usage: $0 asan|tsan" >&2; exit 2 ;;
esac
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "${dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_CUDA=OFF \
  -DBATON_SANITIZE="${sanitize}" "${launcher[@]}"
cmake --build "${dir}" -j"$(nproc)"
ctest --test-dir "${dir}" --output-on-failure -j"$(nproc)" --timeout 1200
