#include "cloud_prefill/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"

namespace baton {

PrefixCache::PrefixCache(uint64_t max_bytes, const KvGeometry& geometry)
    : max_bytes_(max_bytes),
      geometry_(geometry),
      block_bytes_(static_cast<uint64_t>(geometry.n_layer) * 2 * kPrefixDigestBlockTokens * geometry.kv_dim() *
                   sizeof(float)) {}

std::string prefix_cache_partition(const std::string& tenant, const std::string& cache_salt) {
  if (cache_salt.empty()) return tenant;
  std::string partition = tenant;
  partition.push_back('\0');
  partition += "salt:" + to_hex(sha256(cache_salt));
  return partition;
}

std::string PrefixCache::make_key(const std::string& partition, const Digest256& digest) {
  std::string key = partition;
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return key;
}

int64_t PrefixCache::load_longest(const std::string& partition, std::span<const int32_t> tokens, int64_t max_tokens,
                                  F32KvCache& kv) {
  BATON_CHECK(kv.size() == 0);
  if (max_bytes_ == 0) return 0;
  const int64_t max_blocks =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::min(max_tokens, kv.capacity())) /
      kPrefixDigestBlockTokens;
  if (max_blocks <= 0) return 0;
  const std::vector<Digest256> digests = prefix_block_digests(tokens.first(max_blocks * kPrefixDigestBlockTokens));
  const int64_t kv_dim = geometry_.kv_dim();
  const int64_t block_floats = kPrefixDigestBlockTokens * kv_dim;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t blocks = 0;
  for (; blocks < max_blocks; ++blocks) {
    auto it = index_.find(make_key(partition, digests[static_cast<size_t>(blocks)]));
    if (it == index_.end()) break;
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used
    const std::vector<float>& data = it->second->kv;
    const int64_t pos = blocks * kPrefixDigestBlockTokens;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      const float* k = data.data() + (int64_t{layer} * 2) * block_floats;
      const float* v = k + block_floats;
      const absl::Status stored = kv.store(layer, pos, kPrefixDigestBlockTokens, k, v);
      BATON_CHECK(stored.ok(), "copying cached KV into the request cache failed");
    }
  }
  const int64_t hit = blocks * kPrefixDigestBlockTokens;
  kv.set_size(hit);
  stats_.hit_tokens += static_cast<uint64_t>(hit);
  return hit;
}

void PrefixCache::insert(const std::string& partition, std::span<const int32_t> tokens, const F32KvCache& kv) {
  if (max_bytes_ == 0 || block_bytes_ > max_bytes_) return;
  BATON_CHECK(kv.size() >= static_cast<int64_t>(tokens.size()));
  const std::vector<Digest256> digests = prefix_block_digests(tokens);
  const int64_t kv_dim = geometry_.kv_dim();
  const int64_t block_floats = kPrefixDigestBlockTokens * kv_dim;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < digests.size(); ++i) {
    std::string key = make_key(partition, digests[i]);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      continue;
    }
    Entry entry{std::move(key), std::vector<float>(static_cast<size_t>(geometry_.n_layer * 2 * block_floats))};
    const int64_t pos = static_cast<int64_t>(i) * kPrefixDigestBlockTokens;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      float* k = entry.kv.data() + (int64_t{layer} * 2) * block_floats;
      float* v = k + block_floats;
      // Rows of one layer are contiguous in the F32 cache.
      std::memcpy(k, kv.k_row(layer, pos), static_cast<size_t>(block_floats) * sizeof(float));
      std::memcpy(v, kv.v_row(layer, pos), static_cast<size_t>(block_floats) * sizeof(float));
    }
    lru_.push_front(std::move(entry));
    index_[lru_.front().key] = lru_.begin();
    stats_.bytes += block_bytes_;
    ++stats_.entries;
    stats_.inserted_tokens += kPrefixDigestBlockTokens;
    evict_locked();
  }
}

void PrefixCache::evict_locked() {
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
    stats_.bytes -= block_bytes_;
    --stats_.entries;
    ++stats_.evicted_entries;
  }
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace baton
