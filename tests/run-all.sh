#!/usr/bin/env bash
# Installs the dependencies (profile test), builds everything (CUDA too when
# nvcc is found) and runs the whole test suite with ctest. .ci/run calls this.
# deploy/build.sh is the main job's build configuration too: after
# deploy/main-job.sh only the test targets are left to build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh --profile test
# install-deps.sh installed redis-server: the shared-state tests must run
# here, never skip (tests/support/redis_server.h, tests/e2e/shared_state_test.sh).
export BATON_REQUIRE_REDIS=1
bash deploy/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
# Then the unit and integration tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (the cheaper sanitizer; TSan and the e2e
# scripts under sanitizers: tests/run-sanitized.sh). Its instrumented build
# and run take ~20 minutes from a cold compiler cache, so it runs only when
# the suite above was quick (a warm cache: <= 420 s), and then under a
# `timeout` that ends it by minute 28 (CI has 30); a pass cut short says so
# (its logs so far: build-asan/*.log), and a sanitizer error or failed test
# in what it did run still fails.
# BATON_SKIP_ASAN=1 skips it.
budget=$(( 1680 - SECONDS ))
if [[ "${BATON_SKIP_ASAN:-0}" == 1 ]]; then
  echo "run-all.sh: ASan/UBSan pass skipped (BATON_SKIP_ASAN=1)"
elif (( SECONDS > 420 )); then
  echo "run-all.sh: ASan/UBSan pass skipped: the suite took ${SECONDS} s (> 420 s), CI time would not allow it"
else
  rm -f build-asan/*.log  # a pass cut short must not be judged by older logs
  set +e
  timeout --signal=TERM --kill-after=30 "${budget}" bash tests/run-sanitized.sh asan --gtest-only
  rc=$?
  set -e
  if (( rc == 124 || rc == 137 )); then
    echo "run-all.sh: ASan/UBSan pass NOT finished: stopped at the CI time budget (${budget} s); its logs so far: build-asan/*.log"
    if grep -sqE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|\[  FAILED  \]' build-asan/*.log; then
      echo "run-all.sh: ...and the part that ran found an error" >&2
      exit 1
    fi
  elif (( rc != 0 )); then
    exit "${rc}"
  fi
fi
