// PackBackend: where prefix packs live durably, behind the service's
// in-memory PrefixPackStore (issue 19): a directory (--pack-dir, one
// replica) or Redis (--state, shared by every replica). A value is a pack
// exactly as uploaded, in the pack file format (kv_pack_file.h: the magic,
// then the stream's messages as sent); the backend stores and returns bytes
// and never interprets them: whoever reads a value verifies it again through
// KvStreamReader (fingerprint, block checksums, trailer digest) before use.
//
// Keys are (tenant, pack id), plus an index (tenant, prefix digest) -> pack
// id. Each tenant's packs count against a quota (the bytes `charge` gives a
// pack), enforced by the backend so that it holds across replicas.
//
// Errors: ALREADY_EXISTS (the id holds another prefix), RESOURCE_EXHAUSTED
// (the quota, with the numbers), anything else means the backend failed
// (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, I/O errors). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/util/sha256.h"

namespace baton {

// The bytes a pack counts against its tenant's quota, from its token count
// and the size of its value (the service: the value plus its decoded f32 KV,
// what a replica holds once it serves the pack).
using PackChargeFn = std::function<uint64_t(uint32_t token_count, uint64_t value_bytes)>;

struct PackValue {
  std::string pack_id;
  std::string bytes;  // the pack file's bytes, unverified
};

class PackBackend {
 public:
  virtual ~PackBackend() = default;

  // For logs and errors: "directory DIR", "redis".
  virtual std::string name() const = 0;
  // True when other processes change it too (Redis): a copy in memory must
  // be revalidated (digest_of) before it is served.
  virtual bool shared() const = 0;
  // OK when `charge` more bytes fit `tenant`'s quota now (an upload's early
  // check at its header; put() checks again). A shared backend asks the
  // tier even without a quota, so that an upload fails at its header when
  // the tier is down.
  virtual absl::Status check_quota(const std::string& tenant, uint64_t charge) = 0;
  // Stores `value` as `tenant`'s pack `pack_id` of prefix `digest`. True
  // (already present) when the id already held that digest: nothing changes.
  virtual absl::StatusOr<bool> put(const std::string& tenant, const std::string& pack_id, const Digest256& digest,
                                   uint32_t token_count, std::string_view value) = 0;
  // nullopt when `tenant` has no such pack.
  virtual absl::StatusOr<std::optional<PackValue>> get_by_id(const std::string& tenant,
                                                             const std::string& pack_id) = 0;
  virtual absl::StatusOr<std::optional<PackValue>> get_by_digest(const std::string& tenant,
                                                                 const Digest256& digest) = 0;
  // The prefix digest the pack has now (nullopt: none): revalidates a copy
  // in memory (deleted, or replaced by another prefix, on another replica).
  virtual absl::StatusOr<std::optional<Digest256>> digest_of(const std::string& tenant,
                                                             const std::string& pack_id) = 0;
  // The pack id `digest` names for `tenant` (nullopt: none).
  virtual absl::StatusOr<std::optional<std::string>> id_of(const std::string& tenant, const Digest256& digest) = 0;
  // Deletes the pack; the bytes its charge freed, nullopt when it did not exist.
  virtual absl::StatusOr<std::optional<uint64_t>> remove(const std::string& tenant, const std::string& pack_id) = 0;
};

// `text` made safe as one component of a file name or a ':'-separated Redis
// key: bytes other than [A-Za-z0-9_-] become "%XX" (so "." and ".." cannot
// occur, nor '/', ':', '{' or '}'); an empty text is "%". A result over 160
// characters is cut to 96 and followed by '~' and the SHA-256 (hex) of the
// text ('~' is never left as is, so the two forms cannot collide). Injective.
std::string pack_key_component(std::string_view text);

// The first 16 hex digits of a model fingerprint digest: what keeps one
// model's packs apart from another's in a shared directory or Redis.
std::string short_model_id(std::string_view fingerprint_digest_hex);

// Parses "<64 hex digits>" (INVALID_ARGUMENT otherwise).
absl::StatusOr<Digest256> parse_digest_hex(std::string_view hex);

}  // namespace baton
