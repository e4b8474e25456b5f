// PrefixPackStore: prefix packs uploaded with PutPrefix (a system prompt, a
// domain document: a KV stream with first_position 0), per tenant, under a
// byte cap for the whole store and a quota per tenant. A pack is kept as its
// verified stream (GetPrefix sends those messages back exactly as stored,
// without copying them) and as f32 KV decoded from it (a Prefill naming the
// pack copies that instead of computing its tokens — the edge holds the same
// decoded KV, so both ends agree).
//
// Memory is claimed before it is used: an upload reserves the bytes its
// header declares (reserve) before any block is read; put() turns the
// reservation into the stored pack's bytes, and a reservation that is
// dropped (a failed upload) frees them. Without a durable backend there is
// no eviction: a full store or quota refuses new packs (RESOURCE_EXHAUSTED
// with the numbers) until the tenant deletes one (remove), because a pack is
// something a tenant uploaded on purpose and edges name it by id; dropping it
// behind their back would turn every later request into a silent recompute.
// With one (`evictable`: PackLibrary, --pack-dir or --state redis) this store
// is a cache of the durable set: room is made by dropping the least recently
// used packs (reloaded from the backend when named again), and an id stored
// again with another prefix replaces the copy (the backend decided).
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/kv_stream.h"
#include "common/util/sha256.h"
#include "proto/baton.pb.h"

namespace baton {

struct StoredPack {
  std::string pack_id;
  Digest256 prefix_digest{};
  std::vector<int32_t> tokens;              // the pack's tokens [0, token_count)
  // The verified stream as uploaded: header, blocks, trailer. Immutable once
  // stored; GetPrefix writes these very messages.
  std::vector<v1::KvStreamMessage> messages;
  std::shared_ptr<const F32KvCache> kv;     // decoded KV of `tokens`
  uint64_t encoded_bytes = 0;               // payload bytes of the stream
  uint64_t stored_bytes = 0;                // encoded stream + decoded KV
};

// The stream's messages of a verified segment (payloads moved, not copied).
std::vector<v1::KvStreamMessage> kv_stream_messages(KvSegment segment);

struct PutPackResult {
  std::shared_ptr<const StoredPack> pack;
  bool already_present = false;
};

class PrefixPackStore {
 public:
  // `tenant_quota_bytes` 0: each tenant may fill the whole store.
  PrefixPackStore(uint64_t max_bytes, uint64_t tenant_quota_bytes, bool evictable = false);

  // Bytes set aside for one upload of `tenant`; released when destroyed
  // unless put() took them over. Move-only.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { release(); }
    uint64_t bytes() const { return bytes_; }
    void release();

   private:
    friend class PrefixPackStore;
    PrefixPackStore* store_ = nullptr;
    std::string tenant_;
    uint64_t bytes_ = 0;
  };

  // RESOURCE_EXHAUSTED (naming the bytes asked, in use and the limit) when
  // `bytes` more would pass the store's cap or the tenant's quota, counting
  // packs stored and uploads reserved.
  absl::StatusOr<Reservation> reserve(const std::string& tenant, uint64_t bytes);

  // Stores a pack for `tenant`. ALREADY_EXISTS when pack_id holds a different
  // prefix; the same prefix again is a no-op (already_present).
  // RESOURCE_EXHAUSTED when the cap or the quota would be passed. With a
  // `reservation` (of the same tenant) its bytes count as free for this pack
  // and are taken over (or released on error).
  absl::StatusOr<PutPackResult> put(const std::string& tenant, std::shared_ptr<StoredPack> pack,
                                    Reservation* reservation = nullptr);

  // Deletes a pack of `tenant` and frees its bytes; the pack lives on for
  // calls still using it. NOT_FOUND when `tenant` has no such pack (another
  // tenant's pack of that id is not touched).
  absl::StatusOr<std::shared_ptr<const StoredPack>> remove(const std::string& tenant, const std::string& pack_id);
  absl::StatusOr<std::shared_ptr<const StoredPack>> remove_by_digest(const std::string& tenant,
                                                                     const Digest256& digest);

  // nullptr when unknown for that tenant. A hit counts as a use (LRU).
  std::shared_ptr<const StoredPack> find_by_id(const std::string& tenant, const std::string& pack_id) const;
  std::shared_ptr<const StoredPack> find_by_digest(const std::string& tenant, const Digest256& digest) const;

  uint64_t bytes() const;                                // stored
  uint64_t reserved_bytes() const;                       // reserved by uploads in progress
  uint64_t tenant_bytes(const std::string& tenant) const;  // stored + reserved
  size_t size() const;
  uint64_t evictions() const;                            // packs dropped for room (evictable only)
  uint64_t max_bytes() const { return max_bytes_; }
  uint64_t tenant_quota_bytes() const { return tenant_quota_bytes_; }

 private:
  using Key = std::pair<std::string, std::string>;  // (tenant, pack id)
  struct Entry {
    std::shared_ptr<const StoredPack> pack;
    mutable uint64_t last_used = 0;  // use_clock_ at the last hit
  };
  using Packs = std::map<Key, Entry>;
  // OK when `bytes` more fit the cap and the quota (mu_ held); evictable:
  // drops least recently used packs until they do.
  absl::Status make_room_locked(const std::string& tenant, uint64_t bytes);
  absl::Status check_room_locked(const std::string& tenant, uint64_t bytes) const;
  std::shared_ptr<const StoredPack> erase_locked(Packs::iterator it);
  std::shared_ptr<const StoredPack> use_locked(const Entry& entry) const;

  const uint64_t max_bytes_;
  const uint64_t tenant_quota_bytes_;
  const bool evictable_;
  mutable std::mutex mu_;
  Packs packs_;                                             // guarded by mu_
  mutable uint64_t use_clock_ = 0;                          // guarded by mu_
  uint64_t evictions_ = 0;                                  // guarded by mu_
  uint64_t bytes_ = 0;                                      // stored, guarded by mu_
  uint64_t reserved_ = 0;                                   // reserved, guarded by mu_
  std::map<std::string, uint64_t> tenant_bytes_;            // stored + reserved per tenant, guarded by mu_
};

}  // namespace baton
