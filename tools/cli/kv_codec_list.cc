#include "kv_codec_list.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/util/check.h"

namespace baton::cli {

std::string expand_codec_list(const std::string& pattern, int head_dim) {
  const int group = std::min(32, head_dim);
  std::string list = pattern;
  for (size_t at = list.find("gG2"); at != std::string::npos; at = list.find("gG2")) {
    list.replace(at, 3, "g" + std::to_string(2 * group));
  }
  for (size_t at = list.find("gG"); at != std::string::npos; at = list.find("gG")) {
    list.replace(at, 2, "g" + std::to_string(group));
  }
  return list;
}

namespace {

// "4-bit codes, f16 scale + minimum per 32 values" for one half (K or V).
std::string half_text(const KvCodecConfig& codec, bool is_key) {
  const KvCodecConfig::Bits bits = codec.bits_for(is_key);
  if (bits == KvCodecConfig::Bits::kF16) return "f16 (lossless up to f16 rounding)";
  const int group = codec.group_size_for(is_key);
  const bool per_channel = is_key && codec.key_axis == KvCodecConfig::KeyAxis::kPerChannel;
  return absl::StrFormat("%s, f16 scale%s per %d %s", bits == KvCodecConfig::Bits::kInt8 ? "8-bit" : "4-bit",
                         bits == KvCodecConfig::Bits::kInt4 ? " + minimum" : "", group,
                         per_channel ? "tokens of one channel (KIVI)" : "values");
}

}  // namespace

std::string describe_codec(const KvCodecConfig& codec) {
  std::string text;
  const std::string keys = half_text(codec, true);
  const std::string values = half_text(codec, false);
  text = keys == values ? "K and V " + keys : absl::StrFormat("keys %s; values %s", keys, values);
  if (codec.pre_rope_keys) text += "; keys before RoPE";
  if (codec.hadamard_keys || codec.hadamard_values) {
    text += codec.hadamard_keys && codec.hadamard_values ? "; Hadamard-rotated heads"
            : codec.hadamard_keys                        ? "; Hadamard-rotated key heads"
                                                         : "; Hadamard-rotated value heads";
  }
  text += codec.zstd_level != 0 ? absl::StrFormat("; zstd level %d on the wire", codec.zstd_level)
                                : "; not compressed";
  return text;
}

absl::Status set_requested_codec(const std::string& name, v1::CodecParams* codec) {
  if (name == "f16" || name == "int8" || name == "int4") {
    codec->set_codec(name == "f16" ? v1::KV_CODEC_F16 : name == "int8" ? v1::KV_CODEC_INT8 : v1::KV_CODEC_INT4);
    return absl::OkStatus();
  }
  if (name == "auto") {  // the edge picks per request (baton-edge --codec auto)
    codec->set_codec(v1::KV_CODEC_AUTO);
    return absl::OkStatus();
  }
  BATON_ASSIGN_OR_RETURN(KvCodecConfig config, parse_kv_codec_config(name));
  BATON_ASSIGN_OR_RETURN(*codec, kv_codec_request_params(config));  // tc: the edge binds its calibration
  return absl::OkStatus();
}

}  // namespace baton::cli
