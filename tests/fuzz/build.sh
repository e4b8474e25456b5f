#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, from the sources they need and the system
# libraries (no CMake build needed):
#
#   tests/fuzz/build.sh             -> build-fuzz/{kv_stream,gguf,tokenizer}_fuzz, build-fuzz/kv_stream_seed_gen
#   BATON_FUZZ_BUILD=DIR tests/fuzz/build.sh
#
# Needs: clang, libclang-rt-14-dev (libFuzzer runtime), protobuf-compiler,
# libprotobuf-dev, libabsl-dev, libxxhash-dev, libzstd-dev, libssl-dev
# (deploy/install-deps.sh installs them all).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${BATON_FUZZ_BUILD:-${root}/build-fuzz}"
cxx="${CXX_FUZZ:-clang++}"
jobs="${JOBS:-2}"
mkdir -p "${out}/gen" "${out}/obj"

protoc --proto_path="${root}" --cpp_out="${out}/gen" "${root}/proto/baton.proto"

sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
cxxflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer "${sanitize[@]}" -fsanitize=fuzzer-no-link
          -I"${root}" -I"${out}/gen" -Wall -Wno-unused-parameter)
# shellcheck disable=SC2207
libs=($(pkg-config --libs absl_statusor absl_str_format absl_strings protobuf libxxhash libzstd libcrypto) -lpthread)

# The KV stream closure: fingerprint, prefix digest, writer, reader, pack files.
sources=(
  common/kv/kv_fingerprint.cc
  common/kv/kv_pack_file.cc
  common/kv/kv_stream.cc
  common/kv/kv_stream_reader.cc
  common/kv/kv_stream_writer.cc
  common/kv/prefix_digest.cc
  common/util/sha256.cc
)

export cxx
objects=()
jobs_list=()
for src in "${sources[@]}"; do
  obj="${out}/obj/$(echo "${src}" | tr '/' '_').o"
  objects+=("${obj}")
  jobs_list+=("${root}/${src} ${obj}")
done
objects+=("${out}/obj/baton.pb.o")
jobs_list+=("${out}/gen/proto/baton.pb.cc ${out}/obj/baton.pb.o")

printf '%s\n' "${jobs_list[@]}" | xargs -P "${jobs}" -L 1 bash -c \
  "$(declare -p cxxflags); "'"${cxx}" "${cxxflags[@]}" -c "$0" -o "$1"'

"${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/kv_stream_fuzz.cc" "${objects[@]}" "${libs[@]}" \
  -o "${out}/kv_stream_fuzz"

# The GGUF + tokenizer closure for gguf_fuzz and tokenizer_fuzz.
model_sources=(common/gguf/*.cc common/tokenizer/*.cc common/model/model_spec.cc common/model/model_metadata.cc
               common/model/arch/*.cc common/util/log.cc common/util/check.cc)
model_objects=()
model_jobs=()
cd "${root}"
for src in ${model_sources[@]}; do
  [[ -f "${src}" ]] || continue
  obj="${out}/obj/$(echo "${src}" | tr '/' '_').o"
  model_objects+=("${obj}")
  model_jobs+=("${root}/${src} ${obj}")
done
cd - > /dev/null
printf '%s\n' "${model_jobs[@]}" | xargs -P "${jobs}" -L 1 bash -c \
  "$(declare -p cxxflags); "'"${cxx}" "${cxxflags[@]}" -c "$0" -o "$1"'
# shellcheck disable=SC2207
model_libs=($(pkg-config --libs icu-uc icu-i18n) -lpthread)
for target in gguf tokenizer; do
  "${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/${target}_fuzz.cc" "${model_objects[@]}" \
    "${objects[@]}" "${libs[@]}" "${model_libs[@]}" -o "${out}/${target}_fuzz"
done
"${cxx}" "${cxxflags[@]}" "${root}/tests/fuzz/kv_stream_seed_gen.cc" "${objects[@]}" "${libs[@]}" \
  -o "${out}/kv_stream_seed_gen"
echo "build.sh: built ${out}/{kv_stream,gguf,tokenizer}_fuzz and ${out}/kv_stream_seed_gen"
