// Shared by the KV stream fuzz target and its seed generator: the receiver's
// model and the codec hooks the fuzzed reader runs with. The seeds are made
// for exactly this model, so mutations reach deep into the block checks.
#pragma once

#include <cstdint>
#include <string>

#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_stream_reader.h"

namespace baton::fuzz {

inline constexpr uint32_t kFuzzLayers = 2;
inline constexpr uint32_t kFuzzHeadsKv = 2;
inline constexpr uint32_t kFuzzHeadDim = 4;
inline constexpr uint64_t kFuzzF16BytesPerToken = uint64_t{kFuzzHeadsKv} * kFuzzHeadDim * 2;

inline ModelFingerprint fuzz_model() {
  ModelFingerprint fp;
  fp.fields = {{"version", "1"},    {"arch", "llama"},   {"n_layer", std::to_string(kFuzzLayers)},
               {"n_head", "4"},     {"n_head_kv", std::to_string(kFuzzHeadsKv)},
               {"head_dim", std::to_string(kFuzzHeadDim)}, {"n_vocab", "512"}};
  fp.digest = to_hex(sha256(canonical_fields(fp.fields)));
  return fp;
}

// Small limits so that the fuzzer spends its time on logic, not memory.
inline KvStreamReaderOptions fuzz_reader_options() {
  KvStreamReaderOptions options;
  options.max_segment_tokens = 4096;
  options.max_blocks = 4096;
  options.max_message_bytes = 256 << 10;
  options.max_block_encoded_bytes = 128 << 10;
  options.max_block_raw_bytes = 1 << 20;
  options.max_segment_encoded_bytes = 8 << 20;
  // Stand-in for the codec owner's callback: the seeds carry f16-sized
  // payloads whatever their codec says.
  options.expected_raw_size = [](const v1::CodecParams&, v1::KvKind, uint32_t n_tokens) -> absl::StatusOr<uint64_t> {
    return n_tokens * kFuzzF16BytesPerToken;
  };
  return options;
}

}  // namespace baton::fuzz
