#!/usr/bin/env bash
# Builds the whole test suite under a sanitizer and runs it.
#   tests/run-sanitized.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer -> build-asan/
#   tests/run-sanitized.sh tsan   # ThreadSanitizer -> build-tsan/, built with clang++
#                                 # (deploy/install-deps.sh --profile fuzz) and
#                                 # tests/tsan-ignorelist.txt, which leaves gRPC's,
#                                 # protobuf's and Abseil's header code uninstrumented
#   tests/run-sanitized.sh asan --gtest-only
#                                 # only the GoogleTest binaries (unit and
#                                 # integration), not the e2e scripts: what
#                                 # tests/run-all.sh (CI) runs after the suite
# No -Werror here: GCC's -Wmaybe-uninitialized is noisy under sanitizer
# instrumentation; the regular build keeps warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
gtest_only=0
[[ "${2:-}" == --gtest-only ]] && gtest_only=1
case "${mode}" in
  asan) sanitize="address,undefined"; dir=build-asan; compilers=()
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
        export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} ;;
  tsan) sanitize="thread"; dir=build-tsan
        # clang, for -fsanitize-ignorelist (GCC has none): the regular build stays on GCC.
        compilers=(-DCMAKE_C_COMPILER="${BATON_TSAN_CC:-clang}" -DCMAKE_CXX_COMPILER="${BATON_TSAN_CXX:-clang++}")
        command -v "${BATON_TSAN_CXX:-clang++}" > /dev/null ||
          { echo "$0: tsan needs clang (deploy/install-deps.sh --profile fuzz)" >&2; exit 2; }
        # Suppressions: only `called_from_lib` for the uninstrumented Debian libraries.
        export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp} ;;
  *) echo "usage: $0 asan|tsan [--gtest-only]" >&2; exit 2 ;;
esac
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# A build folder configured with another compiler (build-tsan/ was GCC's before
# the ignorelist) cannot switch: CMake would keep its cached compiler.
if (( ${#compilers[@]} )) && [[ -f "${dir}/CMakeCache.txt" ]] &&
    ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$(command -v "${BATON_TSAN_CXX:-clang++}")" "${dir}/CMakeCache.txt"; then
  echo "run-sanitized.sh: ${dir} was configured with another compiler; starting it afresh" >&2
  rm -rf "${dir}"
fi
cmake -S . -B "${dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_CUDA=OFF \
  -DBATON_SANITIZE="${sanitize}" "${compilers[@]}" "${launcher[@]}"
if (( gtest_only )); then
  cmake --build "${dir}" -j"$(nproc)" --target baton_unit_tests baton_integration_tests baton_bundled_models
else
  cmake --build "${dir}" -j"$(nproc)"
fi
# Each GoogleTest binary runs whole in one process (ctest would start one
# process per test, which under TSan spends most of its time re-creating the
# synthetic models), the two side by side; then the e2e scripts through ctest
# with the sanitized binaries. Same tests as tests/run-all.sh.
export BATON_SOURCE_DIR=$PWD
export BATON_SANITIZER=${mode}  # e2e scripts relax memory and time bounds under it
status=0
pids=()
for binary in baton_unit_tests baton_integration_tests; do
  [[ -x "${dir}/bin/${binary}" ]] || continue
  "${dir}/bin/${binary}" --gtest_brief=1 > "${dir}/${binary}.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "${pid}" || status=1; done
for binary in baton_unit_tests baton_integration_tests; do
  [[ -f "${dir}/${binary}.log" ]] || continue
  echo "== ${binary} (${mode}): $(grep -E '^\[  (PASSED|FAILED)  \]' "${dir}/${binary}.log" | head -2 | tr '\n' ' ')"
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error:|\[  FAILED  \]' \
      "${dir}/${binary}.log"; then
    status=1
    grep -E -A30 'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error:|\[  FAILED  \]' \
      "${dir}/${binary}.log" | head -120
  fi
done
if (( ! gtest_only )); then
  ctest --test-dir "${dir}" --output-on-failure -j"$(nproc)" --timeout 1200 -L e2e || status=1
fi
echo "run-sanitized.sh ${mode}: $([[ ${status} -eq 0 ]] && echo clean || echo FAILED) (logs: ${dir}/*.log)"
exit "${status}"
