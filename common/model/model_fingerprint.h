// The model part of the fingerprint (DESIGN.md "Fingerprint"): a versioned
// digest over a canonical list of readable fields. Two programs may exchange
// KV only when their model fingerprints are equal; a mismatch names the first
// field that differs and both values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

class Model;

inline constexpr int kModelFingerprintVersion = 1;

struct ModelFingerprint {
  // Ordered (name, value) pairs; the canonical serialization is
  // "name=value\n" for each, and `digest` is its SHA-256 in hex.
  std::vector<std::pair<std::string, std::string>> fields;
  std::string digest;

  const std::string* find(const std::string& name) const;
  std::string canonical() const;
};

absl::StatusOr<ModelFingerprint> model_fingerprint(const Model& model);

// OK when equal; FAILED_PRECONDITION naming the first differing field, e.g.
// "model fingerprint mismatch: n_head_kv is 8 here, 4 in the KV".
absl::Status compare_model_fingerprints(const ModelFingerprint& ours, const ModelFingerprint& theirs,
                                        const std::string& their_name);

}  // namespace baton
