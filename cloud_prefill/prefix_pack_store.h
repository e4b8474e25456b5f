// PrefixPackStore: prefix packs uploaded with PutPrefix (a system prompt, a
// domain document: a KV stream with first_position 0), per tenant, under a
// byte cap. A pack is kept as its verified stream (GetPrefix sends it back
// exactly as stored) and as f32 KV decoded from it (a Prefill naming the pack
// copies that instead of computing its tokens — the edge holds the same
// decoded KV, so both ends agree). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/f32_kv_cache.h"
#include "common/kv/kv_stream.h"
#include "common/util/sha256.h"
#include "proto/baton.pb.h"

namespace baton {

struct StoredPack {
  std::string pack_id;
  Digest256 prefix_digest{};
  std::vector<int32_t> tokens;              // the pack's tokens [0, token_count)
  KvSegment segment;                        // the verified stream as uploaded
  std::shared_ptr<const F32KvCache> kv;     // decoded KV of `tokens`
  uint64_t stored_bytes = 0;                // encoded stream + decoded KV

  // The stream's messages (header, blocks, trailer) as uploaded.
  std::vector<v1::KvStreamMessage> messages() const;
};

struct PutPackResult {
  std::shared_ptr<const StoredPack> pack;
  bool already_present = false;
};

class PrefixPackStore {
 public:
  explicit PrefixPackStore(uint64_t max_bytes);

  // Stores a pack for `tenant`. ALREADY_EXISTS when pack_id holds a different
  // prefix; the same prefix again is a no-op (already_present).
  // RESOURCE_EXHAUSTED when the store's byte cap would be passed.
  absl::StatusOr<PutPackResult> put(const std::string& tenant, std::shared_ptr<StoredPack> pack);

  // nullptr when unknown for that tenant.
  std::shared_ptr<const StoredPack> find_by_id(const std::string& tenant, const std::string& pack_id) const;
  std::shared_ptr<const StoredPack> find_by_digest(const std::string& tenant, const Digest256& digest) const;

  uint64_t bytes() const;
  size_t size() const;

 private:
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  // (tenant, pack id) -> pack; guarded by mu_
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const StoredPack>> packs_;
  uint64_t bytes_ = 0;  // guarded by mu_
};

}  // namespace baton
