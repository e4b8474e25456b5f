// Model identity read from GGUF: the digest of the source weights (stamped
// into derived files such as Q4_0 so the cloud's F16 and the edge's Q4_0
// copies of one model agree) and the digest of the tokenizer.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/util/sha256.h"

namespace baton {

class GgufFile;
class GgufValue;

// Hex SHA-256 of the source weights, stamped by `baton model synth|quantize`.
inline constexpr char kSourceWeightsDigestKey[] = "baton.source_weights_digest";

// SHA-256 over every tensor (name, type, dims, bytes), in name order.
Digest256 compute_weights_digest(const GgufFile& file);

// The stamped digest if the file carries one, else compute_weights_digest.
absl::StatusOr<std::string> source_weights_digest(const GgufFile& file);

// SHA-256 over every `tokenizer.ggml.*` metadata value (tokens, scores, merges,
// token types, special ids, flags), in key order.
Digest256 tokenizer_digest(const GgufFile& file);

// Canonical serialization of a metadata value into a hash (type + content).
void hash_gguf_value(Sha256& hash, const GgufValue& value);

}  // namespace baton
