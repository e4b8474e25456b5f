// SessionCache: the cloud's copy of each conversation's KV (delta prefill for
// follow-up turns, DESIGN.md "The handoff" step 5). Keyed by (tenant, session
// id); holds the token ids and their f32 KV. A follow-up request carries the
// whole history [0, end); if the cached tokens are a prefix of it, their KV
// is reused and only the new tokens are computed. Best effort: least recently
// used sessions go first over the byte cap, and an evicted session is rebuilt
// from the prefix cache or recomputed — the answer is the same.
//
// Who owns an entry (issue 15: the cache must not be an oracle). The
// session id is the entry's only credential, so the service refuses ids
// under kMinSessionIdChars characters (baton-edge sends a 64-hex-character
// HMAC of its own session id, CloudSessionKeys): an id is a secret nobody
// else can guess. On top of that, a request owns the entry only when its
// tokens extend the stored history: every stored token is at the same
// position in the request (a request equal to the history counts). Then
// and only then the entry's KV is reused (and reported as cached_tokens)
// and the request's KV replaces it. A request that diverges anywhere inside
// the stored history, or is shorter than it, learns nothing from the entry
// (0 tokens reused, nothing copied, the entry not even touched in the LRU
// order) and leaves it as it was: whoever holds an id without the history
// cannot test guesses of the text token by token (the matched length is
// never reported) nor overwrite the owner's entry. The cost: an owner whose
// own history diverged (an edge that rolled a turn back) recomputes from the
// prefix cache until the stale entry ages out.
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

namespace baton {

// Shortest PrefillRequest.session_id the service accepts: 32 characters of
// a random or keyed value carry >= 128 bits (hex) and cannot be guessed.
inline constexpr size_t kMinSessionIdChars = 32;

struct SessionCacheStats {
  uint64_t bytes = 0;       // held now
  uint64_t sessions = 0;    // held now
  uint64_t hit_tokens = 0;  // tokens served from the cache, total
  uint64_t evicted = 0;
};

class SessionCache {
 public:
  explicit SessionCache(uint64_t max_bytes);

  // Copies the KV of the session's cached tokens into `kv` (empty) when they
  // are a prefix of `tokens` (the request owns the entry; at most max_tokens
  // of them) and commits it; returns the tokens reused (0 when unknown, or
  // when `tokens` diverge from or stop inside the stored history).
  // `exact` (optional) tells whether the stored KV was computed from the
  // tokens alone (false: it builds on a prefix pack's decoded KV).
  int64_t load(const std::string& tenant, const std::string& session_id, std::span<const int32_t> tokens,
               int64_t max_tokens, F32KvCache& kv, bool* exact = nullptr);

  // Keeps `kv` (holding `tokens`, kv->size() == tokens.size()) as the
  // session's state, replacing the previous one only when `tokens` extend
  // its history (the owner's next turn); else the stored entry stays.
  void store(const std::string& tenant, const std::string& session_id, std::vector<int32_t> tokens,
             std::shared_ptr<const F32KvCache> kv, bool exact = true);

  SessionCacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    std::vector<int32_t> tokens;
    std::shared_ptr<const F32KvCache> kv;
    uint64_t bytes = 0;
    bool exact = true;  // computed from the tokens alone (no pack KV underneath)
  };
  static std::string make_key(const std::string& tenant, const std::string& session_id);
  // True when `tokens` start with every token of `history`.
  static bool extends(const std::vector<int32_t>& history, std::span<const int32_t> tokens);
  void evict_locked();

  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first; guarded by mu_
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;  // guarded by mu_
  SessionCacheStats stats_;  // guarded by mu_
};

}  // namespace baton
