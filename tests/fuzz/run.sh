#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS seconds:
#
#   tests/fuzz/run.sh TARGET SECONDS [libFuzzer flags...]     e.g. run.sh kv_stream 600
#
# Targets: kv_stream, gguf, tokenizer, rans, kv_transform, kv_calibration,
# prefill_request, edge_request (the last two start a real server on
# 127.0.0.1:0 inside the fuzzer).
#
# Builds it first when missing (tests/fuzz/build.sh). The checked-in seeds in
# tests/fuzz/corpus/TARGET/ are read, never written; new inputs go to
# build-fuzz/corpus/TARGET/ and crashes to build-fuzz/artifacts/TARGET/.
# Turn a crash into a regression test in tests/unit/ before fixing it.
set -euo pipefail

if (( $# < 2 )); then
  echo "usage: $0 TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
target="$1"
seconds="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${BATON_FUZZ_BUILD:-${root}/build-fuzz}"
binary="${out}/${target}_fuzz"
if [[ ! -x "${binary}" ]]; then
  case "${target}" in
    prefill_request|edge_request) "${root}/tests/fuzz/build.sh" services ;;  # in-process servers, gRPC
    *) "${root}/tests/fuzz/build.sh" kv ;;
  esac
fi

export BATON_SOURCE_DIR="${BATON_SOURCE_DIR:-${root}}"  # tokenizer_fuzz loads vocabularies from the tree
work="${out}/corpus/${target}"
artifacts="${out}/artifacts/${target}"
mkdir -p "${work}" "${artifacts}"
exec "${binary}" -max_total_time="${seconds}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="${artifacts}/" "$@" "${work}" "${root}/tests/fuzz/corpus/${target}"
