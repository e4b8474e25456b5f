// SessionStore: the edge agent's sessions, in memory under a byte cap (LRU)
// and, when a directory is given, on disk: every completed turn is saved
// atomically (write a temp file, fsync, rename; mode 0600), so a crash or
// kill -9 leaves the last complete turn intact. Sessions evicted from memory
// stay on disk and are loaded again on their next turn. On start, files are
// indexed; one whose model fingerprint differs from the served model is
// refused with an error naming the differing field (and left on disk).
// One file per session, "<dir>/<session id>.session" (format:
// session_file.h).
//
// Thread-safe. A session is checked out for the length of one turn; a second
// checkout of the same id fails with FAILED_PRECONDITION until it is returned.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_cache/kv_cache.h"
#include "common/model/model_fingerprint.h"
#include "common/util/sha256.h"
#include "edge_decode/store/session.h"

namespace baton {

struct SessionStoreOptions {
  std::string dir;                 // empty: memory only (nothing persists)
  uint64_t max_memory_bytes = 0;   // KV bytes kept in memory; 0: no cap
  int max_sessions = 0;            // sessions kept in memory; 0: no cap
  // Caps on the session files under dir: past either, the least recently
  // used idle (not checked out) sessions are deleted, file and memory, and
  // logged; 0: no cap.
  int max_files = 0;
  uint64_t max_disk_bytes = 0;
};

// What ListSessions shows.
struct SessionSummary {
  std::string id;
  uint32_t token_count = 0;        // tokens the KV holds
  uint64_t kv_bytes = 0;           // in memory now (0 when only on disk)
  KvCodecConfig codec;
  std::string pack_id;
  Digest256 prefix_digest{};       // prefix_digest of the KV's tokens [0, token_count)
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  bool persisted = false;          // a file under dir holds the last turn
  bool busy = false;               // checked out
  // Turn records (Session::turns): turns begun, the first held (0: none),
  // what truncation dropped over the session's life.
  uint32_t turn_count = 0;
  uint32_t first_held_turn = 0;
  uint32_t dropped_turns = 0;
  uint64_t dropped_tokens = 0;
};

class SessionStore {
 public:
  // `model` is the served model's fingerprint (sessions must match it);
  // `geometry` the KV geometry of the served model.
  SessionStore(SessionStoreOptions options, ModelFingerprint model, KvGeometry geometry);
  ~SessionStore();

  // Creates dir (mode 0700) if needed and indexes the session files in it
  // (headers only; KV loads on checkout). Files that fail (bad magic,
  // fingerprint mismatch, truncated) are not indexed; their errors go to
  // `refused` (one line each, naming the file and the reason).
  absl::Status open(std::vector<std::string>* refused = nullptr);

  // True when `id` is known (in memory or on disk).
  bool contains(const std::string& id) const;

  // Takes the session out for a turn (loads it from disk if it was evicted).
  // NOT_FOUND: unknown id. FAILED_PRECONDITION: already checked out, or its
  // file no longer matches the model (the message names the field).
  // DATA_LOSS: the file is corrupt.
  absl::StatusOr<std::unique_ptr<Session>> checkout(const std::string& id);

  // Returns a session after a successful turn: saves it (when dir is set)
  // before anything else, then keeps it in memory, evicting least recently
  // used sessions (never busy ones) over the caps. If the save fails the
  // session is still returned to memory, the old file stays intact, and the
  // error is returned.
  absl::Status commit(std::unique_ptr<Session> session);

  // Returns a session unchanged (a failed or cancelled turn): no save.
  void release(std::unique_ptr<Session> session);

  // A new session id for a first turn: reserves it (busy) so a concurrent
  // first turn of the same id fails with FAILED_PRECONDITION. The caller
  // either commits a Session with that id or calls abandon(id).
  absl::Status reserve(const std::string& id);
  void abandon(const std::string& id);

  // Deletes the session from memory and disk. NOT_FOUND, or
  // FAILED_PRECONDITION while checked out. Returns the bytes freed (memory +
  // file).
  absl::StatusOr<uint64_t> remove(const std::string& id);

  // Most recently used first.
  std::vector<SessionSummary> list() const;
  size_t size() const;                 // sessions known (memory or disk)
  uint64_t memory_bytes() const;       // KV bytes held in memory now
  // KV bytes of the checked-out sessions other than `id` (what no eviction
  // can free while they run).
  uint64_t busy_memory_bytes_except(const std::string& id) const;
  size_t file_count() const;           // session files under dir

 private:
  struct Entry;
  // "<dir>/<id>.session".
  std::string path_for(const std::string& id) const;
  // The entry of `id` (reserved ones included); null when unknown.
  Entry* find_locked(const std::string& id) const;
  void erase_locked(const Entry* entry);
  void touch_locked(Entry& entry);
  uint64_t memory_bytes_locked() const;
  // Moves least recently used resident sessions out of memory (saving those
  // whose file is stale first) until both caps hold; never busy ones, never
  // `keep` when there is no dir (it would be lost).
  void evict_locked(const Entry* keep);
  // Deletes least recently used idle sessions that have a file (never
  // `keep`) until the files fit max_files and max_disk_bytes.
  void evict_files_locked(const Entry* keep);

  SessionStoreOptions options_;
  ModelFingerprint model_;
  KvGeometry geometry_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;  // guarded by mu_ (implementation may change the container)
  uint64_t clock_ = 0;                           // LRU clock, guarded by mu_: larger is more recent
};

}  // namespace baton
