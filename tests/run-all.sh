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
# scripts under sanitizers: tests/run-sanitized.sh). It roughly doubles the
# run, so it is skipped, saying so, when the suite above already took more
# than 12 minutes (CI has 30) or with BATON_SKIP_ASAN=1.
if [[ "${BATON_SKIP_ASAN:-0}" == 1 ]]; then
  echo "run-all.sh: ASan/UBSan pass skipped (BATON_SKIP_ASAN=1)"
elif (( SECONDS > 720 )); then
  echo "run-all.sh: ASan/UBSan pass skipped: the suite took ${SECONDS} s (> 720 s), CI time would not allow it"
else
  bash tests/run-sanitized.sh asan --gtest-only
fi
