// DirPackBackend: prefix packs in a directory (--pack-dir), so that one
// replica without Redis keeps its packs across restarts. Layout:
//
//   DIR/<model id>/<tenant>/<pack id>.batonkv
//
// (model id: short_model_id of the served model; tenant and pack id through
// pack_key_component, so any id is one safe file name). Each file is a pack
// file (kv_pack_file.h), written atomically (AtomicFile: temp, fsync,
// rename), mode 0600 in 0700 directories. open() indexes the files by their
// headers only (pack id, prefix digest, token count; no block is read),
// removes temp files of interrupted writes and skips (with a log line) files
// it cannot read; values are read from disk when asked for, and verified by
// the caller. The quota counts the indexed packs of each tenant; only this
// process writes the directory (one replica: with several, use Redis).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cloud_prefill/state/pack_backend.h"

namespace baton {

class DirPackBackend final : public PackBackend {
 public:
  // Creates DIR/<model id> if needed and indexes it. `quota_bytes` 0: none.
  static absl::StatusOr<std::unique_ptr<DirPackBackend>> open(const std::string& dir, const std::string& model_id,
                                                             uint64_t quota_bytes, PackChargeFn charge);

  std::string name() const override { return "directory " + root_; }
  bool shared() const override { return false; }
  absl::Status check_quota(const std::string& tenant, uint64_t charge) override;
  absl::StatusOr<bool> put(const std::string& tenant, const std::string& pack_id, const Digest256& digest,
                           uint32_t token_count, std::string_view value) override;
  absl::StatusOr<std::optional<PackValue>> get_by_id(const std::string& tenant, const std::string& pack_id) override;
  absl::StatusOr<std::optional<PackValue>> get_by_digest(const std::string& tenant, const Digest256& digest) override;
  absl::StatusOr<std::optional<Digest256>> digest_of(const std::string& tenant, const std::string& pack_id) override;
  absl::StatusOr<std::optional<std::string>> id_of(const std::string& tenant, const Digest256& digest) override;
  absl::StatusOr<std::optional<uint64_t>> remove(const std::string& tenant, const std::string& pack_id) override;

  size_t size() const;  // packs indexed

 private:
  struct Entry {
    Digest256 digest{};
    uint64_t charge = 0;
  };
  struct Tenant {  // keyed by the tenant's file name
    std::map<std::string, Entry> packs;            // pack id -> entry
    std::map<Digest256, std::string> by_digest;    // prefix digest -> pack id
    uint64_t bytes = 0;                            // sum of the charges
  };

  DirPackBackend(std::string root, uint64_t quota_bytes, PackChargeFn charge);
  absl::Status index();
  void index_tenant(const std::string& tenant_dir);
  std::string tenant_dir(const std::string& tenant) const;
  std::string pack_path(const std::string& tenant, const std::string& pack_id) const;
  absl::Status check_quota_locked(const std::string& tenant, uint64_t charge) const;
  absl::StatusOr<std::optional<PackValue>> read(const std::string& tenant, const std::string& pack_id);

  const std::string root_;  // DIR/<model id>
  const uint64_t quota_bytes_;
  const PackChargeFn charge_;
  mutable std::mutex mu_;  // guards tenants_ and serializes writes
  std::map<std::string, Tenant> tenants_;
};

}  // namespace baton
