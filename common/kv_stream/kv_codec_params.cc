#include "common/kv_stream/kv_codec_params.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/util/check.h"

namespace baton {
namespace {

using Bits = KvCodecConfig::Bits;
using KeyAxis = KvCodecConfig::KeyAxis;

// The codec of a block as the codec runs it, checked against the geometry.
absl::StatusOr<KvCodecConfig> block_config(const v1::CodecParams& params, const KvGeometry& geometry) {
  BATON_ASSIGN_OR_RETURN(KvCodecConfig config, kv_codec_config_from_params(params));
  BATON_RETURN_IF_ERROR(config.validate(geometry));
  return config;
}

}  // namespace

namespace {

v1::CodecParams transform_params(const KvCodecConfig& config) {
  const KvTransformParams& t = *config.transform;
  v1::CodecParams params;
  params.set_codec(v1::KV_CODEC_TC);
  params.set_pre_rope_keys(true);
  params.set_zstd_level(config.zstd_level);
  v1::TransformCodecParams* p = params.mutable_transform();
  p->set_budget_tenths(static_cast<uint32_t>(t.budget_tenths));
  p->set_sink_tokens(static_cast<uint32_t>(t.sink_tokens));
  p->set_recent_tokens(static_cast<uint32_t>(t.recent_tokens));
  p->set_calibration_sha256(std::string(reinterpret_cast<const char*>(t.calibration.data()), t.calibration.size()));
  return params;
}

absl::StatusOr<KvCodecConfig> transform_config_from_params(const v1::CodecParams& params) {
  const v1::TransformCodecParams& p = params.transform();
  if (p.calibration_sha256().size() != 32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec params: tc calibration_sha256 is %d bytes; expected 32", p.calibration_sha256().size()));
  }
  if (p.budget_tenths() > 80 || p.sink_tokens() > 4096 || p.recent_tokens() > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec params: tc budget_tenths %u, sink_tokens %u or recent_tokens %u out of range", p.budget_tenths(),
        p.sink_tokens(), p.recent_tokens()));
  }
  if (!params.has_zstd_level()) {
    return absl::InvalidArgumentError("KV codec params: zstd_level is unset (0 means rANS for tc; say so)");
  }
  KvTransformParams t;
  t.budget_tenths = static_cast<int>(p.budget_tenths());
  t.sink_tokens = static_cast<int>(p.sink_tokens());
  t.recent_tokens = static_cast<int>(p.recent_tokens());
  std::memcpy(t.calibration.data(), p.calibration_sha256().data(), t.calibration.size());
  if (!params.pre_rope_keys() || params.hadamard_keys() || params.hadamard_values() ||
      params.key_codec() != v1::KV_CODEC_UNSPECIFIED || params.group_size() != 0 || params.key_group_size() != 0) {
    return absl::InvalidArgumentError(
        "KV codec params: tc takes pre_rope_keys and nothing of the quantized codecs' fields");
  }
  KvCodecConfig config = transform_kv_codec_config(t, params.zstd_level());
  BATON_RETURN_IF_ERROR(config.validate());
  return config;
}

}  // namespace

absl::StatusOr<v1::CodecParams> kv_codec_request_params(const KvCodecConfig& config) {
  if (!config.transform || config.transform->bound()) return kv_codec_params(config);
  BATON_RETURN_IF_ERROR(config.validate());
  v1::CodecParams params = transform_params(config);
  params.mutable_transform()->clear_calibration_sha256();
  return params;
}

absl::StatusOr<v1::CodecParams> kv_codec_params(const KvCodecConfig& config) {
  BATON_RETURN_IF_ERROR(config.validate());
  if (config.transform) {
    if (!config.transform->bound()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV codec %s is not bound to a calibration (KvTransformCodec::Create binds it)", config.to_string()));
    }
    return transform_params(config);
  }
  if (config.layout != KvCodecConfig::Layout::kPlanes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: the rows layout is for measurements only; KV streams carry the planes layout "
        "(CodecParams has no layout field)",
        config.to_string()));
  }
  v1::CodecParams params;
  switch (config.bits) {
    case Bits::kF16:
      params.set_codec(v1::KV_CODEC_F16);
      break;
    case Bits::kInt8:
      params.set_codec(v1::KV_CODEC_INT8);
      break;
    case Bits::kInt4:
      params.set_codec(v1::KV_CODEC_INT4);
      break;
  }
  if (config.key_bits && *config.key_bits != config.bits) {
    params.set_key_codec(*config.key_bits == Bits::kInt8 ? v1::KV_CODEC_INT8
                         : *config.key_bits == Bits::kInt4 ? v1::KV_CODEC_INT4
                                                           : v1::KV_CODEC_F16);
  }  // unset: keys use `codec`
  if (config.quantized()) {
    params.set_group_size(static_cast<uint32_t>(config.group_size));
    if (config.key_group_size > 0 && config.key_group_size != config.group_size) {
      params.set_key_group_size(static_cast<uint32_t>(config.key_group_size));
    }
    params.set_key_axis(config.key_axis == KeyAxis::kPerChannel ? v1::KEY_AXIS_PER_CHANNEL
                                                                : v1::KEY_AXIS_PER_TOKEN);
  }  // F16: group_size 0, key_axis unspecified, as the fingerprint encodes them
  params.set_pre_rope_keys(config.pre_rope_keys);
  params.set_hadamard_keys(config.hadamard_keys);
  params.set_hadamard_values(config.hadamard_values);
  params.set_zstd_level(config.zstd_level);
  return params;
}

absl::StatusOr<KvCodecConfig> kv_transform_request_config(const v1::CodecParams& params, const KvGeometry& geometry) {
  KvTransformParams t;  // unset fields: the defaults
  const v1::TransformCodecParams& p = params.transform();
  // Out-of-range values are clamped so that validate() names them.
  if (p.budget_tenths() > 0) t.budget_tenths = static_cast<int>(std::min<uint32_t>(p.budget_tenths(), 1000));
  if (params.has_transform()) {
    t.sink_tokens = static_cast<int>(std::min<uint32_t>(p.sink_tokens(), 1u << 20));
    t.recent_tokens = static_cast<int>(std::min<uint32_t>(p.recent_tokens(), 1u << 20));
  }
  if (!p.calibration_sha256().empty()) {
    if (p.calibration_sha256().size() != t.calibration.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("codec.transform.calibration_sha256 has %d bytes; a SHA-256 has %d",
                                                        p.calibration_sha256().size(), t.calibration.size()));
    }
    std::memcpy(t.calibration.data(), p.calibration_sha256().data(), t.calibration.size());
  }
  KvCodecConfig config = transform_kv_codec_config(t, params.has_zstd_level() ? params.zstd_level() : 0);
  if (absl::Status valid = config.validate(geometry); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("codec: ", valid.message()));
  }
  return config;
}

absl::StatusOr<KvCodecConfig> kv_codec_config_from_params(const v1::CodecParams& params) {
  if (params.codec() == v1::KV_CODEC_TC) return transform_config_from_params(params);
  KvCodecConfig config;
  switch (params.codec()) {
    case v1::KV_CODEC_F16:
      config.bits = Bits::kF16;
      break;
    case v1::KV_CODEC_INT8:
      config.bits = Bits::kInt8;
      break;
    case v1::KV_CODEC_INT4:
      config.bits = Bits::kInt4;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("KV codec params: codec is %s; expected f16, int8, int4 or tc",
                                                        kv_codec_name(params.codec())));
  }
  if (config.quantized()) {
    if (params.group_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV codec params: %s needs a group_size (0 is the request default, not a codec)",
                          kv_bits_name(config.bits)));
    }
    if (params.group_size() > 1024) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV codec params: group_size %u is outside [1, 1024]", params.group_size()));
    }
    config.group_size = static_cast<int>(params.group_size());
    switch (params.key_axis()) {
      case v1::KEY_AXIS_PER_TOKEN:
        config.key_axis = KeyAxis::kPerToken;
        break;
      case v1::KEY_AXIS_PER_CHANNEL:
        config.key_axis = KeyAxis::kPerChannel;
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrFormat("KV codec params: key_axis is %s; expected per_token or per_channel",
                            key_axis_name(params.key_axis())));
    }
    if (params.key_group_size() > 1024) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV codec params: key_group_size %u is outside [0, 1024]", params.key_group_size()));
    }
    if (params.key_group_size() != 0 && params.key_group_size() != params.group_size()) {
      config.key_group_size = static_cast<int>(params.key_group_size());
    }
  }  // F16: group_size and key_axis carry nothing; the config keeps its defaults
  switch (params.key_codec()) {
    case v1::KV_CODEC_UNSPECIFIED:
      break;  // keys use `codec`
    case v1::KV_CODEC_F16:
    case v1::KV_CODEC_INT8:
    case v1::KV_CODEC_INT4: {
      const Bits key_bits = params.key_codec() == v1::KV_CODEC_F16    ? Bits::kF16
                            : params.key_codec() == v1::KV_CODEC_INT8 ? Bits::kInt8
                                                                       : Bits::kInt4;
      if (key_bits != config.bits) config.key_bits = key_bits;
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV codec params: key_codec is %s; expected unspecified, f16, int8 or int4", kv_codec_name(params.key_codec())));
  }
  config.pre_rope_keys = params.pre_rope_keys();
  config.hadamard_keys = params.hadamard_keys();
  config.hadamard_values = params.hadamard_values();
  if (!params.has_zstd_level()) {
    return absl::InvalidArgumentError("KV codec params: zstd_level is unset (0 means uncompressed; say so)");
  }
  config.zstd_level = params.zstd_level();
  config.layout = KvCodecConfig::Layout::kPlanes;
  BATON_RETURN_IF_ERROR(config.validate());
  return config;
}

KvExpectedRawSizeFn kv_expected_raw_size_fn(const KvGeometry& geometry) {
  return [geometry](const v1::CodecParams& codec, v1::KvKind kind, uint32_t n_tokens) -> absl::StatusOr<uint64_t> {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig config, block_config(codec, geometry));
    return kv_block_raw_size(config, geometry, kind == v1::KV_KIND_K, n_tokens);
  };
}

KvPayloadCheckFn kv_trial_decode_fn(const KvGeometry& geometry) {
  return [geometry](const v1::CodecParams& codec, const v1::KvBlock& block) -> absl::Status {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig config, block_config(codec, geometry));
    if (config.transform) return absl::OkStatus();  // decoded by load_kv_segment (kv_handoff.h)
    absl::StatusOr<QuantizedKvBlock> decoded = decode_kv_block_quantized(
        config, geometry, block.kind() == v1::KV_KIND_K, block.payload(), block.raw_size(), block.token_count());
    if (!decoded.ok()) {
      return absl::Status(decoded.status().code(),
                          absl::StrFormat("KV block layer %u %s at %u (%u tokens): %s", block.layer(),
                                          kv_kind_name(block.kind()), block.token_begin(), block.token_count(),
                                          std::string(decoded.status().message())));
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<uint64_t> kv_header_raw_bytes(const v1::KvHeader& header, const KvGeometry& geometry) {
  BATON_ASSIGN_OR_RETURN(KvCodecConfig config, block_config(header.codec(), geometry));
  const double bytes = std::ceil(kv_raw_bytes_per_token(config, geometry) * header.token_count());
  return static_cast<uint64_t>(bytes);
}

KvStreamReaderOptions kv_reader_options_with_codec(const KvGeometry& geometry, KvStreamReaderOptions options,
                                                   bool trial_decode) {
  options.expected_raw_size = kv_expected_raw_size_fn(geometry);
  if (trial_decode) options.check_payload = kv_trial_decode_fn(geometry);
  return options;
}

}  // namespace baton
