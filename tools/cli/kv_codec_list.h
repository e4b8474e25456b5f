// Codec lists of the KV benchmarks and `baton plan`: "G" in a name stands
// for the model's group size min(32, head_dim), "G2" for twice that; and a
// one-line explanation of a codec name.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/kv_codec/kv_codec_config.h"
#include "proto/baton.pb.h"

namespace baton::cli {

// Expands G / G2 in a comma-separated list of codec names for a head_dim.
std::string expand_codec_list(const std::string& pattern, int head_dim);

// What a codec name means, in one line: "4-bit values, f16 scale + minimum
// per 32 values; keys: 4-bit, one channel over 128 tokens per group (KIVI);
// zstd level 3 on the wire".
std::string describe_codec(const KvCodecConfig& codec);

// The codec a request asks for with --codec NAME (generate --edge, pack build
// --cloud): a bare width (f16, int8, int4) asks for the server's default
// variant of it, "auto" lets the edge pick per request, a full name asks for
// exactly that variant. Call it only for a
// name given: a request without a codec leaves it to the server's --codec.
absl::Status set_requested_codec(const std::string& name, v1::CodecParams* codec);

}  // namespace baton::cli
