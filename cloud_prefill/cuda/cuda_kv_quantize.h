// KV quantization on the GPU with the exact bytes of the CPU codec
// (common/kv_codec/kv_codec.h), so the edge cannot tell which side quantized its
// KV: a block quantized here and then laid out / compressed on the host by
// encode_quantized_kv_block() equals encode_kv_block() of the same rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/kv_cache/kv_cache.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_codec_config.h"

namespace baton::cuda {

// Same contract as quantize_kv_block() for rows already on the device
// (device_rows: f32 [n_tokens, n_head_kv, head_dim], finite, |x| <= 65504, in
// the config's key domain). Supported: F16, and INT8 with per-token groups,
// without Hadamard rotation; other configs are UNIMPLEMENTED (quantize on
// the host). Synchronizes `stream`.
absl::StatusOr<QuantizedKvBlock> quantize_kv_block_on_device(const KvCodecConfig& config,
                                                            const KvGeometry& geometry, bool is_key,
                                                            const float* device_rows, int64_t n_tokens,
                                                            cudaStream_t stream);

}  // namespace baton::cuda
