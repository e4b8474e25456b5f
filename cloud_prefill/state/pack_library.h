// PackLibrary: the service's prefix packs, as the in-memory PrefixPackStore
// over an optional durable PackBackend (issue 19). Without a backend it is
// the memory store, as before. With one:
// - put stores in the backend FIRST and only then in memory; a backend that
//   fails makes put fail UNAVAILABLE (a pack is never kept only in this
//   replica's memory when the others could not see it);
// - the memory store is a cache of the durable set (evictable): a pack named
//   by a call and missing from memory is fetched from the backend, verified
//   again (decode: KvStreamReader against the served model: fingerprint,
//   block checksums, trailer digest; then its id and digest against the
//   key), decoded and kept in memory; a value that does not verify is a miss
//   (nullptr) plus a log line and a count (stats), never wrong KV;
// - a memory hit of a shared backend (Redis) is revalidated first (one GET
//   of the pack's claim): a pack deleted, or replaced by another prefix, on
//   another replica is dropped here too. While the backend fails (the
//   Redis client fails at once during its backoff) the memory copy is
//   served; a pack only the backend holds is UNAVAILABLE;
// - remove deletes from the backend, then from memory.
// Calls block on the backend (bounded by the Redis client's timeouts).
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefix_pack_store.h"
#include "cloud_prefill/state/pack_backend.h"

namespace baton {

struct PackLibraryStats {
  uint64_t loads = 0;            // packs fetched from the backend into memory
  uint64_t rejected_values = 0;  // fetched values that did not verify (treated as missing)
  uint64_t stale_dropped = 0;    // memory copies dropped after revalidation (deleted or replaced elsewhere)
  uint64_t backend_errors = 0;   // backend calls that failed
};

struct RemovedPack {
  std::string pack_id;
  uint64_t freed_bytes = 0;  // the copy in memory, else the backend's charge
};

class PackLibrary {
 public:
  // A stored value (a pack file's bytes) verified and decoded into a pack.
  using DecodeFn = std::function<absl::StatusOr<std::shared_ptr<StoredPack>>(std::string_view value)>;

  // `memory` must outlive this and be evictable when `backend` is given;
  // `backend` null: memory only.
  PackLibrary(PrefixPackStore* memory, std::unique_ptr<PackBackend> backend, DecodeFn decode);

  // An upload's reservation at its header: memory, then (backend) the
  // tenant's durable quota for `bytes`. UNAVAILABLE when the backend cannot
  // tell (the upload would fail at the end anyway).
  absl::StatusOr<PrefixPackStore::Reservation> reserve(const std::string& tenant, uint64_t bytes);
  // Stores a verified pack: backend, then memory. ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED as PrefixPackStore::put; UNAVAILABLE when the
  // backend failed (nothing stored).
  absl::StatusOr<PutPackResult> put(const std::string& tenant, std::shared_ptr<StoredPack> pack,
                                    PrefixPackStore::Reservation* reservation);

  // nullptr when `tenant` has no such pack (or its value does not verify);
  // UNAVAILABLE when it is not in memory and the backend cannot be read.
  absl::StatusOr<std::shared_ptr<const StoredPack>> find_by_id(const std::string& tenant,
                                                               const std::string& pack_id);
  absl::StatusOr<std::shared_ptr<const StoredPack>> find_by_digest(const std::string& tenant,
                                                                   const Digest256& digest);

  // NOT_FOUND when `tenant` has no such pack; UNAVAILABLE when the backend
  // failed (nothing deleted here either: deleting only this copy would let
  // the pack come back from the backend).
  absl::StatusOr<RemovedPack> remove(const std::string& tenant, const std::string& pack_id);
  absl::StatusOr<RemovedPack> remove_by_digest(const std::string& tenant, const Digest256& digest);

  const PackBackend* backend() const { return backend_.get(); }
  PackLibraryStats stats() const;

 private:
  // A memory hit checked against a shared backend: the pack, nullptr when it
  // is gone there, or the backend's newer pack of that id.
  absl::StatusOr<std::shared_ptr<const StoredPack>> revalidate(const std::string& tenant,
                                                               std::shared_ptr<const StoredPack> pack);
  // A value fetched from the backend, verified against `pack_id` (and
  // `digest` when given), decoded and cached in memory; nullptr when it does
  // not verify.
  std::shared_ptr<const StoredPack> load(const std::string& tenant, const PackValue& value,
                                         const Digest256* digest);
  // A backend error as the caller's status: UNAVAILABLE naming the backend.
  absl::Status backend_failed(const absl::Status& status, std::string_view what);

  PrefixPackStore* memory_;
  std::unique_ptr<PackBackend> backend_;
  DecodeFn decode_;
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> rejected_values_{0};
  std::atomic<uint64_t> stale_dropped_{0};
  std::atomic<uint64_t> backend_errors_{0};
};

}  // namespace baton
