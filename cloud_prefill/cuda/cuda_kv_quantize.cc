#include "cloud_prefill/cuda/cuda_kv_quantize.h"

#include "absl/strings/str_format.h"
#include "cloud_prefill/cuda/cuda_check.h"
#include "cloud_prefill/cuda/cuda_ops.h"
#include "cloud_prefill/cuda/device_memory.h"
#include "common/util/check.h"

namespace baton::cuda {

absl::StatusOr<QuantizedKvBlock> quantize_kv_block_on_device(const KvCodecConfig& config,
                                                            const KvGeometry& geometry, bool is_key,
                                                            const float* device_rows, int64_t n_tokens,
                                                            cudaStream_t stream) {
  BATON_RETURN_IF_ERROR(config.validate(geometry));
  if (n_tokens < 1 || n_tokens > kMaxKvBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block of %d tokens; must be in [1, %d]", n_tokens, kMaxKvBlockTokens));
  }
  const KvCodecConfig::Bits bits = config.bits_for(is_key);
  const bool hadamard = is_key ? config.hadamard_keys : config.hadamard_values;
  const bool per_channel = is_key && config.key_axis == KvCodecConfig::KeyAxis::kPerChannel;
  if (bits == KvCodecConfig::Bits::kInt4 || hadamard || (per_channel && bits != KvCodecConfig::Bits::kF16)) {
    return absl::UnimplementedError(absl::StrFormat(
        "codec %s %s: only f16 and per-token int8 without Hadamard are quantized on the GPU",
        config.to_string(), is_key ? "keys" : "values"));
  }
  const int64_t n = n_tokens * geometry.kv_dim();
  QuantizedKvBlock block;
  block.n_tokens = n_tokens;
  DeviceMemory codes, scales;
  if (bits == KvCodecConfig::Bits::kF16) {
    block.codes.resize(static_cast<size_t>(n) * 2);
    BATON_RETURN_IF_ERROR(codes.reserve(block.codes.size()));
    BATON_CUDA_RETURN_IF_ERROR(launch_f32_to_f16(device_rows, n, codes.as<uint16_t>(), stream));
  } else {
    const int group = config.group_size_for(is_key);
    BATON_CHECK(geometry.head_dim % group == 0, "validate() guarantees group | head_dim");
    block.codes.resize(static_cast<size_t>(n));
    block.scales.resize(static_cast<size_t>(n / group));
    BATON_RETURN_IF_ERROR(codes.reserve(block.codes.size()));
    BATON_RETURN_IF_ERROR(scales.reserve(block.scales.size() * sizeof(uint16_t)));
    BATON_CUDA_RETURN_IF_ERROR(
        launch_quantize_int8_groups(device_rows, n, group, codes.as<int8_t>(), scales.as<uint16_t>(), stream));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block.scales.data(), scales.get(),
                                               block.scales.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                                               stream));
  }
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(block.codes.data(), codes.get(), block.codes.size(), cudaMemcpyDeviceToHost, stream));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return block;
}

}  // namespace baton::cuda
