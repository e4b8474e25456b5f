// The agent's default KV codec by name (baton-edge --codec), shared with the
// CLI's local path (baton generate --model --codec), so both keep the KV of
// a prompt in the same store.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_geometry.h"

namespace baton {

// What a request that leaves the codec unset gets when the agent has no
// cloud and no KV calibration: --codec auto falls back to it, and it is
// --codec's default under --policy local.
inline constexpr const char* kEdgeFallbackCodec = "int4";

// f16 | int8 | int4 (the defaults of those widths, default_kv_codec_config),
// auto (its fallback, int4) or a full codec name (parse_kv_codec_config),
// validated against `geometry`. INVALID_ARGUMENT naming `name` otherwise.
absl::StatusOr<KvCodecConfig> default_codec_from_name(const std::string& name, const KvGeometry& geometry);

}  // namespace baton
