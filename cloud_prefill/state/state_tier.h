// StateTier: the shared L2 of the cloud's prefix cache and session cache
// (issue 19), over a RedisClient; with no client it holds nothing and every
// call is a no-op miss (in-process only, the default).
//
// Key layout (all keys of one model share the fingerprint id, so two models
// never read each other's KV and a model's keys can be listed or dropped):
//   prefix block  bt1:<fp>:pb:<part>:{<digest>}
//   session       bt1:<fp>:ss:<tenant>:{<sid>}
// <fp>     the first 12 hex digits of the model fingerprint's digest;
// <part>   16 hex digits of SHA-256("baton state partition\0" + partition)
//          (prefix_cache_partition: the tenant, and the salt's digest);
// <tenant> 16 hex digits of SHA-256("baton state tenant\0" + tenant);
// <digest> the block's chained prefix digest d_{i+1} (64 hex digits);
// <sid>    SHA-256("baton state session\0" + tenant + "\0" + session id) in
//          hex: the id is a secret and never appears in Redis in clear.
// The {hash tag} is the per-block (per-session) part, so a Redis Cluster
// spreads one prompt's blocks over all its slots.
//
// Value envelope (little-endian), verified on every read:
//   "BTST"  u16 version (1)  u8 kind (1 prefix block, 2 session)  u8 flags
//   (bit 0: exact session KV, bit 1: payload byte-shuffled + zstd)
//   64 bytes: the model fingerprint digest (hex)
//   u16 key length, the key the value was written under (echoed: a value
//   copied under another key, tenant or session is refused)
//   u64 raw payload bytes, u64 stored payload bytes
//   16 bytes: XXH3-128 of every byte above and the stored payload
//   the stored payload
// Raw payloads: a prefix block is f32 [n_layer, 2 (K, V), 64, kv_dim]; a
// session is u32 n_tokens, i32 [n_tokens] tokens, f32 [n_layer, 2, n_tokens,
// kv_dim] — the f32 KV exactly as computed, so a hit is the bytes a
// recompute gives. Any verification failure (short, magic, version, kind,
// fingerprint, key, checksum, size for this geometry, decompression) is a
// miss, one log line and a `corrupt` count: never wrong KV.
//
// Writes go through a bounded write-behind queue drained by one thread: the
// job hands over a reference to its (immutable) KV cache and returns at once;
// a full queue drops the write and counts it. Reads and writes run under the
// client's bounded timeouts; a node in backoff fails them at once, so a dead
// tier costs a miss (counted as an error), not a wait.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cloud_prefill/state/redis_client.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"

namespace baton {

struct StateTierOptions {
  std::chrono::seconds ttl{24 * 3600};         // of prefix blocks and sessions; 0: none (LRU only)
  uint64_t max_queued_bytes = uint64_t{512} << 20;  // KV pinned by pending writes; more: dropped
  size_t max_queued_writes = 256;              // pending writes; more: dropped
  uint64_t max_session_bytes = uint64_t{256} << 20;  // raw session value; larger ones are not written
  bool compress = true;                        // byte-shuffle + zstd level 1 (lossless)
};

// Per kind of value (prefix blocks, sessions); totals.
struct StateTierKindStats {
  uint64_t hits = 0;            // values read and verified
  uint64_t misses = 0;          // absent, or (sessions) not owned by the request
  uint64_t errors = 0;          // reads or writes that failed or were skipped (tier down)
  uint64_t corrupt = 0;         // values that failed verification
  uint64_t dropped_writes = 0;  // write queue full, or over max_session_bytes
  uint64_t writes = 0;          // values written
  uint64_t written_bytes = 0;   // envelope bytes written (what Redis holds)
  uint64_t written_tokens = 0;  // tokens of KV those values hold
};

struct StateTierStats {
  std::string kind;  // "memory" | "redis"
  bool healthy = true;
  std::string detail;
  StateTierKindStats prefix;
  StateTierKindStats session;
};

class StateTier {
 public:
  enum class Kind : uint8_t { kPrefixBlock = 1, kSession = 2 };

  // `redis` null: in-process only. `fingerprint` and `geometry` are the
  // served model's.
  StateTier(std::shared_ptr<RedisClient> redis, const ModelFingerprint& fingerprint, const KvGeometry& geometry,
            StateTierOptions options = {});
  // Writes what is queued (each write bounded by the client's timeouts), then stops.
  ~StateTier();
  StateTier(const StateTier&) = delete;
  StateTier& operator=(const StateTier&) = delete;

  bool enabled() const { return redis_ != nullptr; }

  // Prefix blocks: `kv` holds [0, kv.size()) of `tokens`, kv.size() a
  // multiple of 64; copies the following blocks found in L2, block by block
  // until a miss, up to max_tokens; commits and returns the new size.
  int64_t load_prefix_blocks(const std::string& partition, std::span<const int32_t> tokens, int64_t max_tokens,
                             F32KvCache& kv);
  // Queues the full blocks of `tokens` from block first_block on (`kv` holds
  // them, and is not changed any more).
  void store_prefix_blocks(const std::string& partition, std::span<const int32_t> tokens,
                           std::shared_ptr<const F32KvCache> kv, int64_t first_block);

  // Sessions, with SessionCache's ownership rule: the stored history must be
  // a prefix of `tokens`, else nothing is copied (0). Fills `kv` (empty) and
  // `exact` like SessionCache::load.
  int64_t load_session(const std::string& tenant, const std::string& session_id, std::span<const int32_t> tokens,
                       int64_t max_tokens, F32KvCache& kv, bool* exact);
  // Queues the session's state ([0, tokens.size()) of `kv`). `replace`: the
  // request owned the previous state (it extended it), so it is overwritten;
  // else the value is written only when none exists (SET NX): a request that
  // did not own the history never replaces it.
  void store_session(const std::string& tenant, const std::string& session_id, std::vector<int32_t> tokens,
                     std::shared_ptr<const F32KvCache> kv, bool exact, bool replace);

  // Waits until the write queue is empty (tests, shutdown).
  void flush();
  StateTierStats stats() const;

  // Keys and envelopes, exposed for the tests.
  std::string prefix_block_key(const std::string& partition, const Digest256& digest) const;
  std::string session_key(const std::string& tenant, const std::string& session_id) const;
  // The stored value of `raw` under `key`.
  std::string seal(Kind kind, const std::string& key, std::string_view raw, bool exact) const;
  // The raw payload of `value` read under `key`, or why it is refused.
  absl::StatusOr<std::string> open(Kind kind, const std::string& key, std::string_view value, bool* exact) const;

 private:
  struct Write {
    Kind kind = Kind::kPrefixBlock;
    std::string key;                      // sessions
    std::string partition;                // prefix blocks
    std::vector<int32_t> tokens;          // prefix: the prompt; session: the history
    std::shared_ptr<const F32KvCache> kv;
    int64_t first_block = 0;              // prefix blocks
    bool exact = true;
    bool replace = true;
    uint64_t pinned_bytes = 0;
  };
  StateTierKindStats& kind_stats(Kind kind) { return kind == Kind::kPrefixBlock ? prefix_ : session_; }
  void enqueue(Write write);
  void writer_loop();
  void write_prefix_blocks(const Write& write);
  void write_session(const Write& write);
  // SET with the TTL (and NX unless `replace`); counts the outcome.
  void put(Kind kind, const std::string& key, const std::string& value, int64_t tokens, bool replace);
  // GET; nullopt on a miss of any cause (counted, logged when corrupt).
  std::optional<std::string> fetch(Kind kind, const std::string& key, bool* exact);
  void count(Kind kind, uint64_t StateTierKindStats::*field, uint64_t n = 1);
  std::string raw_session(const std::vector<int32_t>& tokens, const F32KvCache& kv) const;

  const std::shared_ptr<RedisClient> redis_;
  const std::string fingerprint_digest_;  // hex, 64 characters
  const std::string key_prefix_;          // "bt1:<fp>:"
  const KvGeometry geometry_;
  const StateTierOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // queue_ grew or stopping_
  std::condition_variable idle_cv_;   // queue_ drained
  std::deque<Write> queue_;           // guarded by mu_
  uint64_t queued_bytes_ = 0;         // guarded by mu_
  bool busy_ = false;                 // guarded by mu_: the writer holds a write
  bool stopping_ = false;             // guarded by mu_
  StateTierKindStats prefix_;         // guarded by mu_
  StateTierKindStats session_;        // guarded by mu_
  std::thread writer_;                // last: starts after the members above exist
};

}  // namespace baton
