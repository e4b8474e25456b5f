// The full fingerprint of a KV segment (DESIGN.md "Fingerprint"): which model
// made it (model part), for which token context (context part), encoded how
// (codec part). Each part is a list of readable (name, value) fields with a
// SHA-256 over their canonical encoding "name=value\n"...; the whole
// fingerprint digest is SHA-256(model digest || context digest || codec digest).
//
// The receiver builds the fingerprint it expects (its own model, the context it
// asked for, the codec it accepts) and `verify_kv_fingerprint` names the first
// field that differs with both values, e.g.
//   "model fingerprint mismatch: n_head_kv is 8 here, 4 in the KV stream"
//   "context mismatch: prefix_digest is 3f2a... here, 91c0... in the KV stream"
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "proto/baton.pb.h"

namespace baton {

// Fingerprint scheme version (KvFingerprint.version).
inline constexpr uint32_t kKvFingerprintVersion = 1;

using FingerprintFields = std::vector<std::pair<std::string, std::string>>;

// "name=value\n" for each field, in order (the same encoding as
// ModelFingerprint::canonical()).
std::string canonical_fields(const FingerprintFields& fields);

// Context part: the token segment [first_position, first_position +
// token_count) whose whole prefix [0, end) has digest prefix_digest.
struct KvContext {
  uint32_t first_position = 0;
  uint32_t token_count = 0;
  Digest256 prefix_digest{};  // common/kv_stream/prefix_digest.h
};

struct KvFingerprint {
  uint32_t version = kKvFingerprintVersion;
  ModelFingerprint model;
  KvContext context;
  v1::CodecParams codec;  // exact codec, every field set (zstd_level present)

  // first_position, token_count, prefix_digest (hex).
  FingerprintFields context_fields() const;
  // codec, group_size, key_axis, pre_rope_keys, hadamard_keys, hadamard_values,
  // zstd_level. For F16, group_size and key_axis are ignored by the codec and
  // encoded as 0 / "unspecified" so that they never cause a mismatch.
  FingerprintFields codec_fields() const;

  Digest256 model_digest() const;    // SHA-256 of canonical_fields(model.fields)
  Digest256 context_digest() const;  // SHA-256 of canonical_fields(context_fields())
  Digest256 codec_digest() const;    // SHA-256 of canonical_fields(codec_fields())
  Digest256 digest() const;          // SHA-256(model || context || codec digests)
};

// Readable names of codec enums ("int8", "per_channel"); "unknown(7)" for
// values this build does not know.
std::string kv_codec_name(int codec);
std::string key_axis_name(int key_axis);
std::string kv_kind_name(int kind);  // "K", "V"

// ModelFingerprint <-> proto. The proto carries the canonical field list (the
// authority) and readable typed copies. from_proto recomputes the digest from
// the fields and rejects a message whose digest does not match
// (INVALID_ARGUMENT).
v1::ModelFingerprint model_fingerprint_to_proto(const ModelFingerprint& fingerprint);
absl::StatusOr<ModelFingerprint> model_fingerprint_from_proto(const v1::ModelFingerprint& proto);

// Writes the fingerprint and the readable context and codec values into a
// header (fingerprint, codec, first_position, token_count, prefix_digest);
// token_ids and the other header fields are the caller's.
void set_header_fingerprint(const KvFingerprint& fingerprint, v1::KvHeader* header);
v1::KvFingerprint kv_fingerprint_to_proto(const KvFingerprint& fingerprint);

// Reads the fingerprint of a stream from its header and checks that it is
// self-consistent: version known (FAILED_PRECONDITION otherwise), model
// digest matches its fields, context/codec digests match the header's readable
// values, whole digest matches its parts (INVALID_ARGUMENT otherwise).
absl::StatusOr<KvFingerprint> kv_fingerprint_from_header(const v1::KvHeader& header);

// OK when `theirs` equals `ours`; otherwise FAILED_PRECONDITION naming the
// first differing field and both values, checked in the order version, model,
// context, codec. `their_name` completes "... in <their_name>".
absl::Status verify_kv_fingerprint(const KvFingerprint& ours, const KvFingerprint& theirs,
                                   const std::string& their_name = "the KV stream");

}  // namespace baton
