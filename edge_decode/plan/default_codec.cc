#include "edge_decode/plan/default_codec.h"

#include "absl/strings/str_cat.h"
#include "common/util/check.h"

namespace baton {

absl::StatusOr<KvCodecConfig> default_codec_from_name(const std::string& name, const KvGeometry& geometry) {
  KvCodecConfig config;
  if (name == "f16") {
    config = default_kv_codec_config(KvCodecConfig::Bits::kF16, geometry);
  } else if (name == "int8") {
    config = default_kv_codec_config(KvCodecConfig::Bits::kInt8, geometry);
  } else if (name == "int4" || name == "auto") {
    config = default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry);
  } else {
    BATON_ASSIGN_OR_RETURN(config, parse_kv_codec_config(name));
  }
  absl::Status valid = config.validate(geometry);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("--codec ", name, ": ", valid.message()));
  return config;
}

}  // namespace baton
