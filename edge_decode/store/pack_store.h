// PackStore: the edge agent's prefix packs (DESIGN.md "KV stream format"): KV
// stream files with first_position 0 under --packs DIR ("<pack id>.batonkv").
// At start the directory is indexed (headers only; a pack whose model
// fingerprint differs is refused with the field named); a session that
// begins with a pack loads its KV instead of computing those tokens. Packs
// pulled from the cloud (PullPack) are written here atomically, under a byte
// cap (least recently used pulled packs are deleted first; packs placed in
// the directory by hand are never deleted). A pulled pack is marked by an
// empty "<pack id>.batonkv.pulled" file next to it, whose mtime is its last
// use, so the cap and its LRU order survive a restart.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_cache/kv_cache.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model_fingerprint.h"
#include "proto/baton.pb.h"

namespace baton {

struct PackStoreOptions {
  std::string dir;                 // empty: no packs (every lookup is NOT_FOUND)
  // Cap on pulled pack files (LRU), and so on one pulled pack: checked at its
  // stream header (token_count x raw bytes per token of its codec) before
  // any block is read or any byte is written; 0: no cap.
  uint64_t max_pulled_bytes = 0;
  // The KV memory budget a pack must fit to be loaded at all (same check,
  // same moment); 0: no check.
  uint64_t max_pack_memory_bytes = 0;
};

struct PackSummary {
  std::string pack_id;
  std::string description;
  std::vector<int32_t> tokens;     // the pack's token ids [0, token_count)
  Digest256 prefix_digest{};
  KvCodecConfig codec;             // the pack's wire codec
  uint64_t file_bytes = 0;
  std::string path;
  bool pulled = false;             // written by PullPack (subject to the cap)
};

class PackStore {
 public:
  PackStore(PackStoreOptions options, ModelFingerprint model, KvGeometry geometry, KvRope rope);

  // Indexes the directory (creating it if missing). Refused files go to
  // `refused` (one line each: file and reason).
  absl::Status open(std::vector<std::string>* refused = nullptr);

  // NOT_FOUND when unknown.
  absl::StatusOr<PackSummary> find(const std::string& pack_id) const;
  std::vector<PackSummary> list() const;

  // Reads the pack file, verifies every block and the trailer against the
  // model, and loads its KV into `target` (which must be empty: size() == 0,
  // capacity >= the pack's tokens); `target` is unchanged on error.
  absl::StatusOr<KvSegmentLoad> load_into(const std::string& pack_id, KvCache& target) const;

  // Stores a pack received as a KV stream (PullPack): `source` yields the
  // messages; each is checked as it arrives (KvStreamReader) and written to a
  // temp file that is renamed into place only after the trailer verified.
  // RESOURCE_EXHAUSTED at the header (nothing read past it, no file made)
  // when the pack's raw size passes max_pulled_bytes or the memory
  // budget.
  // ALREADY_EXISTS when pack_id is taken and !overwrite. `progress` (optional)
  // is called after each block with (blocks so far, wire bytes so far).
  absl::StatusOr<PackSummary> add_from_stream(const std::string& pack_id, const KvMessageSource& source,
                                              bool overwrite,
                                              const std::function<void(uint32_t, uint64_t)>& progress = {});

 private:
  // "<dir>/<pack id>.batonkv".
  std::string path_for(const std::string& pack_id) const;
  // Reads a pack file's header and checks it against the model.
  absl::StatusOr<PackSummary> index_file(const std::string& path, const std::string& pack_id) const;
  uint64_t pulled_bytes_locked() const;
  // The header-time caps of add_from_stream.
  absl::Status check_pulled_header(const v1::KvHeader& header) const;
  // Deletes least recently used pulled packs other than `keep` until the
  // pulled packs fit max_pulled_bytes.
  void evict_pulled_locked(const std::string& keep);

  PackStoreOptions options_;
  ModelFingerprint model_;
  KvGeometry geometry_;
  KvRope rope_;
  mutable std::mutex mu_;
  std::vector<PackSummary> packs_;  // guarded by mu_
  // LRU clock of pulled packs' last load or pull (larger is more recent);
  // guarded by mu_. Loads update it, hence mutable.
  mutable std::map<std::string, uint64_t> last_use_;
  mutable uint64_t clock_ = 0;
  std::set<std::string> pulling_;   // ids with an add_from_stream running; guarded by mu_
};

}  // namespace baton
