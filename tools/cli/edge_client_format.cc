#include "edge_client_format.h"

#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/util/sha256.h"

namespace baton::cli {

const char* serving_state_name(v1::ServingState state) {
  switch (state) {
    case v1::SERVING_STATE_LOADING: return "LOADING";
    case v1::SERVING_STATE_WARMING: return "WARMING";
    case v1::SERVING_STATE_READY: return "READY";
    case v1::SERVING_STATE_DRAINING: return "DRAINING";
    default: return "UNSPECIFIED";
  }
}

std::string codec_params_name(const v1::CodecParams& params) {
  if (absl::StatusOr<KvCodecConfig> config = kv_codec_config_from_params(params); config.ok()) {
    return config->to_string();
  }
  switch (params.codec()) {
    case v1::KV_CODEC_F16: return "f16";
    case v1::KV_CODEC_INT8: return "int8";
    case v1::KV_CODEC_INT4: return "int4";
    case v1::KV_CODEC_TC: return "tc";
    case v1::KV_CODEC_AUTO: return "auto";
    default: return "default";
  }
}

std::string short_digest(const std::string& digest_bytes, size_t n_hex) {
  if (digest_bytes.empty()) return "-";
  const std::string hex = to_hex(reinterpret_cast<const uint8_t*>(digest_bytes.data()), digest_bytes.size());
  return hex.substr(0, n_hex);
}

}  // namespace baton::cli
