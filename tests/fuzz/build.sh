#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, from the sources they need and the system
# libraries (no CMake build needed):
#
#   tests/fuzz/build.sh             -> build-fuzz/{kv_stream,gguf,tokenizer,rans,kv_transform,kv_calibration}_fuzz,
#                                      build-fuzz/kv_stream_seed_gen,
#                                      build-fuzz/{prefill_request,edge_request}_fuzz
#   tests/fuzz/build.sh kv          -> only the first group (kv_stream, gguf, tokenizer, rans, kv_transform,
#                                      kv_calibration, seed generator)
#   tests/fuzz/build.sh services    -> only prefill_request_fuzz and edge_request_fuzz
#   BATON_FUZZ_BUILD=DIR tests/fuzz/build.sh
#
# Objects go through ccache when it is installed. Needs: clang,
# libclang-rt-14-dev (libFuzzer runtime), protobuf-compiler,
# protobuf-compiler-grpc, libprotobuf-dev, libgrpc++-dev, libabsl-dev,
# libxxhash-dev, libzstd-dev, libssl-dev, libicu-dev, libcpp-httplib-dev,
# nlohmann-json3-dev (deploy/install-deps.sh --profile fuzz installs them all).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${BATON_FUZZ_BUILD:-${root}/build-fuzz}"
cxx="${CXX_FUZZ:-clang++}"
jobs="${JOBS:-2}"
group="${1:-all}"
launcher=""
if command -v ccache > /dev/null; then
  launcher=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${root}}"
fi
export launcher
mkdir -p "${out}/gen" "${out}/obj"

protoc --proto_path="${root}" --cpp_out="${out}/gen" "${root}/proto/baton.proto"

# shellcheck disable=SC2054  # one flag with a comma list, not two elements
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
cxxflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer "${sanitize[@]}" -fsanitize=fuzzer-no-link
          -I"${root}" -I"${out}/gen" -Wall -Wno-unused-parameter)
# shellcheck disable=SC2207
libs=($(pkg-config --libs absl_statusor absl_str_format absl_strings protobuf libxxhash libzstd libcrypto) -lpthread)

# The KV stream closure: fingerprint, prefix digest, writer, reader, pack files.
sources=(
  common/kv_stream/kv_fingerprint.cc
  common/kv_stream/kv_pack_file.cc
  common/kv_stream/kv_stream.cc
  common/kv_stream/kv_stream_reader.cc
  common/kv_stream/kv_stream_writer.cc
  common/kv_stream/prefix_digest.cc
  common/util/atomic_file.cc
  common/util/errno_status.cc
  common/util/sha256.cc
)

export cxx
# The KV stream closure (baton.pb.o included) is needed by every group.
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
  "$(declare -p cxxflags); "'${launcher} "${cxx}" "${cxxflags[@]}" -c "$0" -o "$1"'

if [[ "${group}" != services ]]; then
  # The GGUF + tokenizer closure for gguf_fuzz and tokenizer_fuzz.
  model_sources=(common/gguf/*.cc common/tokenizer/*.cc common/model/model_spec.cc common/model/model_metadata.cc
                 common/model/model_fingerprint.cc common/model/layer_window.cc
                 common/model/arch/*.cc common/util/log.cc common/util/check.cc)
  model_objects=()
  model_jobs=()
  cd "${root}"
  for src in "${model_sources[@]}"; do
    [[ -f "${src}" ]] || continue
    obj="${out}/obj/$(echo "${src}" | tr '/' '_').o"
    model_objects+=("${obj}")
    model_jobs+=("${root}/${src} ${obj}")
  done
  cd - > /dev/null
  printf '%s\n' "${model_jobs[@]}" | xargs -P "${jobs}" -L 1 bash -c \
    "$(declare -p cxxflags); "'${launcher} "${cxx}" "${cxxflags[@]}" -c "$0" -o "$1"'
  # shellcheck disable=SC2207
  model_libs=($(pkg-config --libs icu-uc icu-i18n) -lpthread)
  for target in gguf tokenizer; do
    "${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/${target}_fuzz.cc" "${model_objects[@]}" \
      "${objects[@]}" "${libs[@]}" "${model_libs[@]}" -o "${out}/${target}_fuzz"
  done
  # The stream reader checks the fingerprint's layer windows: it links the model closure too.
  "${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/kv_stream_fuzz.cc" "${objects[@]}" \
    "${model_objects[@]}" "${libs[@]}" "${model_libs[@]}" -o "${out}/kv_stream_fuzz"
  "${cxx}" "${cxxflags[@]}" "${root}/tests/fuzz/kv_stream_seed_gen.cc" "${objects[@]}" "${model_objects[@]}" \
    "${libs[@]}" "${model_libs[@]}" -o "${out}/kv_stream_seed_gen"
  # The rANS coder stands alone (abseil only).
  "${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/rans_fuzz.cc" "${root}/common/kv_codec/rans.cc" \
    "${libs[@]}" -o "${out}/rans_fuzz"
  # The KV codec closure for the transform codec and calibration targets, with
  # common/CMakeLists.txt's per-file flags (ISA files; no fused multiply-adds
  # where both ends must compute the same models).
  codec_sources=(common/kv_codec/*.cc common/cpu/ops.cc common/util/cpu_features.cc common/util/log.cc
                 common/util/read_file.cc tests/support/synthetic_calibration.cc)
  codec_objects=()
  codec_jobs=()
  cd "${root}"
  for src in "${codec_sources[@]}"; do
    obj="${out}/obj/codec_$(echo "${src}" | tr '/' '_').o"
    codec_objects+=("${obj}")
    flags=""
    case "${src}" in
      *_avx512.cc) flags="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c" ;;
      *_avx2.cc) flags="-mavx2 -mfma -mf16c" ;;
      */kv_transform_codec.cc|*/rans.cc|*/kv_calibration.cc) flags="-ffp-contract=off" ;;
    esac
    codec_jobs+=("${root}/${src} ${obj}${flags:+ ${flags}}")  # no trailing blank: xargs -L would join lines
  done
  cd - > /dev/null
  printf '%s\n' "${codec_jobs[@]}" | xargs -P "${jobs}" -L 1 bash -c \
    "$(declare -p cxxflags); "'src="$0"; obj="$1"; shift; ${launcher} "${cxx}" "${cxxflags[@]}" "$@" -c "${src}" -o "${obj}"'
  for src in common/util/atomic_file.cc common/util/errno_status.cc common/util/sha256.cc; do
    codec_objects+=("${out}/obj/$(echo "${src}" | tr '/' '_').o")  # built with the stream closure
  done
  for target in kv_transform kv_calibration; do
    "${cxx}" "${cxxflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/${target}_fuzz.cc" "${codec_objects[@]}" \
      "${libs[@]}" -o "${out}/${target}_fuzz"
  done
  echo "build.sh: built ${out}/{kv_stream,gguf,tokenizer,rans,kv_transform,kv_calibration}_fuzz and ${out}/kv_stream_seed_gen"
fi

if [[ "${group}" == kv ]]; then exit 0; fi
# The services closure for prefill_request_fuzz and edge_request_fuzz: the
# whole shared core, both services but their main(), a real gRPC server on
# 127.0.0.1:0 inside the fuzzer, synthetic models written at start.
protoc --proto_path="${root}" --grpc_out="${out}/gen" --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" \
  "${root}/proto/baton.proto"
cd "${root}"
service_sources=(common/*/*.cc common/model/arch/*.cc cloud_prefill/*.cc cloud_prefill/state/*.cc edge_decode/*.cc edge_decode/*/*.cc)
service_objects=()
service_jobs=()
for src in "${service_sources[@]}"; do
  [[ -f "${src}" ]] || continue
  case "${src}" in */main.cc) continue ;; esac
  obj="${out}/obj/svc_$(echo "${src}" | tr '/' '_').o"
  service_objects+=("${obj}")
  isa=""
  case "${src}" in
    *_avx512.cc) isa="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c" ;;
    *_avx2.cc) isa="-mavx2 -mfma -mf16c" ;;
  esac
  service_jobs+=("${root}/${src} ${obj}${isa:+ ${isa}}")  # no trailing blank: xargs -L would join lines
done
cd - > /dev/null
# The web page's files (edge_decode/http/web_ui.h), embedded as edge_decode/CMakeLists.txt does.
cmake -DOUT="${out}/gen/web_assets.cc" -DDIR="${root}/edge_decode/http/web" -P "${root}/edge_decode/http/web/embed.cmake"
service_objects+=("${out}/obj/svc_web_assets.o")
service_jobs+=("${out}/gen/web_assets.cc ${out}/obj/svc_web_assets.o")
# baton::build_info() (Health's version), generated as the top CMakeLists.txt does.
cmake -DSOURCE_DIR="${root}" -DOUT="${out}/gen/build_info.cc" -DBUILD_TYPE=fuzz -DCUDA=OFF \
  -P "${root}/cmake/build_info.cmake"
service_objects+=("${out}/obj/svc_build_info.o")
service_jobs+=("${out}/gen/build_info.cc ${out}/obj/svc_build_info.o")
# shellcheck disable=SC2207
service_cflags=($(pkg-config --cflags cpp-httplib))
printf '%s\n' "${service_jobs[@]}" | xargs -P "${jobs}" -L 1 bash -c \
  "$(declare -p cxxflags service_cflags); "'src="$0"; obj="$1"; shift; ${launcher} "${cxx}" "${cxxflags[@]}" "${service_cflags[@]}" "$@" -c "${src}" -o "${obj}"'
${launcher} "${cxx}" "${cxxflags[@]}" -c "${out}/gen/proto/baton.grpc.pb.cc" -o "${out}/obj/baton.grpc.pb.o"
# shellcheck disable=SC2207
service_libs=($(pkg-config --libs grpc++ cpp-httplib libxxhash libzstd hiredis libssl libcrypto icu-uc icu-i18n protobuf)
              $(pkg-config --libs absl_statusor absl_str_format absl_strings) -lpthread)
for target in prefill_request edge_request; do
  "${cxx}" "${cxxflags[@]}" "${service_cflags[@]}" -fsanitize=fuzzer "${root}/tests/fuzz/${target}_fuzz.cc" \
    "${service_objects[@]}" "${out}/obj/baton.pb.o" "${out}/obj/baton.grpc.pb.o" "${service_libs[@]}" \
    -o "${out}/${target}_fuzz"
done
echo "build.sh: built ${out}/{prefill_request,edge_request}_fuzz"
