// PrefixCache: the cloud's KV of token prefixes, kept by block digest
// (DESIGN.md "KV stream format", prefix_digest.h): entry i of a prompt holds
// the f32 K and V, every layer, of tokens [64 i, 64 i + 64), keyed by
// (partition, d_{i+1}) — the chained digest of the whole prefix [0, 64 (i + 1)),
// since KV at a position depends on every token before it. A request whose
// leading blocks are cached copies them and computes only the rest.
//
// Least recently used entries go first when the byte cap is passed. Keys
// include a partition (prefix_cache_partition: the tenant, and the request's
// cache_salt when it has one), so one tenant never reads another's KV and
// requests with different salts never share blocks. Within one partition a
// hit is observable (cached_tokens, and the time to first block): whoever
// shares a partition can tell whether a prefix was sent before. Callers that
// must not learn that about each other use different tenants or salts.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/util/sha256.h"

namespace baton {

struct PrefixCacheStats {
  uint64_t bytes = 0;          // held now
  uint64_t entries = 0;        // blocks held now
  uint64_t hit_tokens = 0;     // tokens served from the cache, total
  uint64_t inserted_tokens = 0;
  uint64_t evicted_entries = 0;
};

// The cache partition of a request: the tenant alone without a salt, else
// the tenant, a NUL (tenants never contain one) and the salt's SHA-256 in
// hex, so salted and unsalted keys never collide.
std::string prefix_cache_partition(const std::string& tenant, const std::string& cache_salt);

class PrefixCache {
 public:
  // max_bytes: cap on the KV held (0 disables the cache).
  PrefixCache(uint64_t max_bytes, const KvGeometry& geometry);

  // Copies the KV of the longest cached block-aligned prefix of `tokens`, at
  // most max_tokens long, into `kv` (which must be empty) and commits it.
  // Returns its length in tokens (0 on a miss).
  int64_t load_longest(const std::string& partition, std::span<const int32_t> tokens, int64_t max_tokens,
                       F32KvCache& kv);

  // Keeps the full 64-token blocks of `tokens` (whose KV `kv` holds, at least
  // [0, tokens.size())) that are not cached yet.
  void insert(const std::string& partition, std::span<const int32_t> tokens, const F32KvCache& kv);

  uint64_t block_bytes() const { return block_bytes_; }
  PrefixCacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    std::vector<float> kv;  // f32 [n_layer, 2 (K, V), 64, kv_dim]
  };
  static std::string make_key(const std::string& partition, const Digest256& digest);
  void evict_locked();

  const uint64_t max_bytes_;
  const KvGeometry geometry_;
  const uint64_t block_bytes_;  // bytes of one entry's KV
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first; guarded by mu_
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;  // guarded by mu_
  PrefixCacheStats stats_;  // guarded by mu_
};

}  // namespace baton
