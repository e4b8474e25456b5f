#include "cloud_prefill/session_cache.h"

#include <algorithm>

#include "common/util/check.h"

namespace baton {

SessionCache::SessionCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

std::string SessionCache::make_key(const std::string& tenant, const std::string& session_id) {
  std::string key = tenant;
  key.push_back('\0');
  key += session_id;
  return key;
}

bool SessionCache::extends(const std::vector<int32_t>& history, std::span<const int32_t> tokens) {
  return history.size() <= tokens.size() && std::equal(history.begin(), history.end(), tokens.begin());
}

int64_t SessionCache::load(const std::string& tenant, const std::string& session_id, std::span<const int32_t> tokens,
                           int64_t max_tokens, F32KvCache& kv, bool* exact) {
  BATON_CHECK(kv.size() == 0);
  std::shared_ptr<const F32KvCache> source;
  int64_t reuse = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(make_key(tenant, session_id));
    if (it == index_.end()) return 0;
    // Not the owner's next turn: nothing is reused, so nothing is reported.
    if (!extends(it->second->tokens, tokens)) return 0;
    lru_.splice(lru_.begin(), lru_, it->second);
    const Entry& entry = *it->second;
    reuse = std::min({static_cast<int64_t>(entry.tokens.size()), max_tokens, kv.capacity()});
    source = entry.kv;
    if (exact != nullptr) *exact = entry.exact;
    stats_.hit_tokens += static_cast<uint64_t>(reuse);
  }
  if (reuse == 0) return 0;
  // The entry's cache is immutable once stored; copy outside the lock.
  for (int layer = 0; layer < kv.geometry().n_layer; ++layer) {
    const absl::Status stored = kv.store(layer, 0, reuse, source->k_row(layer, 0), source->v_row(layer, 0));
    BATON_CHECK(stored.ok(), "copying cached KV into the request cache failed");
  }
  kv.set_size(reuse);
  return reuse;
}

void SessionCache::store(const std::string& tenant, const std::string& session_id, std::vector<int32_t> tokens,
                         std::shared_ptr<const F32KvCache> kv, bool exact) {
  if (max_bytes_ == 0) return;
  const uint64_t bytes = static_cast<uint64_t>(kv->capacity()) * kv->geometry().kv_dim() * 2 *
                         kv->geometry().n_layer * sizeof(float);
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::string key = make_key(tenant, session_id);
  if (auto it = index_.find(key); it != index_.end()) {
    if (!extends(it->second->tokens, tokens)) return;  // another history: the owner's entry stays
    stats_.bytes -= it->second->bytes;
    --stats_.sessions;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Entry{std::move(key), std::move(tokens), std::move(kv), bytes, exact});
  index_[lru_.front().key] = lru_.begin();
  stats_.bytes += bytes;
  ++stats_.sessions;
  evict_locked();
}

void SessionCache::evict_locked() {
  while (stats_.bytes > max_bytes_ && lru_.size() > 1) {
    stats_.bytes -= lru_.back().bytes;
    --stats_.sessions;
    ++stats_.evicted;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

SessionCacheStats SessionCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace baton
