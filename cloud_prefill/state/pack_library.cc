#include "cloud_prefill/state/pack_library.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/util/check.h"
#include "common/util/log.h"

namespace baton {

PackLibrary::PackLibrary(PrefixPackStore* memory, std::unique_ptr<PackBackend> backend, DecodeFn decode)
    : memory_(memory), backend_(std::move(backend)), decode_(std::move(decode)) {}

absl::Status PackLibrary::backend_failed(const absl::Status& status, std::string_view what) {
  ++backend_errors_;
  return absl::UnavailableError(
      absl::StrFormat("%s: the pack store (%s) failed: %s; retry later", what, backend_->name(), status.message()));
}

absl::StatusOr<PrefixPackStore::Reservation> PackLibrary::reserve(const std::string& tenant, uint64_t bytes) {
  BATON_ASSIGN_OR_RETURN(PrefixPackStore::Reservation reservation, memory_->reserve(tenant, bytes));
  if (backend_ != nullptr) {
    // A tier that is down fails the upload now, not after its last block.
    absl::Status quota = backend_->check_quota(tenant, bytes);
    if (absl::IsResourceExhausted(quota)) return quota;
    if (!quota.ok()) return backend_failed(quota, "PutPrefix stores nothing");
  }
  return reservation;
}

absl::StatusOr<PutPackResult> PackLibrary::put(const std::string& tenant, std::shared_ptr<StoredPack> pack,
                                               PrefixPackStore::Reservation* reservation) {
  if (backend_ == nullptr) return memory_->put(tenant, std::move(pack), reservation);
  absl::StatusOr<std::string> value = kv_pack_bytes(pack->messages);
  if (!value.ok()) return value.status();
  absl::StatusOr<bool> already_present = backend_->put(tenant, pack->pack_id, pack->prefix_digest,
                                                       static_cast<uint32_t>(pack->tokens.size()), *value);
  if (absl::IsAlreadyExists(already_present.status()) || absl::IsResourceExhausted(already_present.status())) {
    return already_present.status();
  }
  if (!already_present.ok()) return backend_failed(already_present.status(), "PutPrefix stored nothing");
  std::shared_ptr<const StoredPack> durable = pack;
  absl::StatusOr<PutPackResult> cached = memory_->put(tenant, std::move(pack), reservation);
  if (!cached.ok()) {  // stored durably all the same: this replica loads it when named
    BATON_WARN("tenant %s: pack '%s' is stored in %s but not kept in memory: %s", tenant.c_str(),
               durable->pack_id.c_str(), backend_->name().c_str(), std::string(cached.status().message()).c_str());
    return PutPackResult{std::move(durable), *already_present};
  }
  cached->already_present = *already_present;
  return cached;
}

std::shared_ptr<const StoredPack> PackLibrary::load(const std::string& tenant, const PackValue& value,
                                                    const Digest256* digest) {
  absl::StatusOr<std::shared_ptr<StoredPack>> pack = decode_(value.bytes);
  absl::Status verified = pack.status();
  if (verified.ok() && (*pack)->pack_id != value.pack_id) {
    verified = absl::DataLossError(absl::StrFormat("it holds pack '%s'", (*pack)->pack_id));
  } else if (verified.ok() && digest != nullptr && (*pack)->prefix_digest != *digest) {
    verified = absl::DataLossError(absl::StrCat("its prefix digest is ", to_hex((*pack)->prefix_digest)));
  }
  if (!verified.ok()) {
    ++rejected_values_;
    BATON_WARN("tenant %s: the stored value of pack '%s' (%zu bytes, %s) does not verify, treated as missing: %s",
               tenant.c_str(), value.pack_id.c_str(), value.bytes.size(), backend_->name().c_str(),
               std::string(verified.message()).c_str());
    return nullptr;
  }
  ++loads_;
  std::shared_ptr<const StoredPack> loaded = *pack;
  absl::StatusOr<PutPackResult> cached = memory_->put(tenant, std::move(*pack), nullptr);
  if (!cached.ok()) {  // too large for the memory store: serve this call, keep nothing
    BATON_WARN("tenant %s: pack '%s' is served but not kept in memory: %s", tenant.c_str(), value.pack_id.c_str(),
               std::string(cached.status().message()).c_str());
    return loaded;
  }
  return cached->pack;
}

absl::StatusOr<std::shared_ptr<const StoredPack>> PackLibrary::revalidate(const std::string& tenant,
                                                                          std::shared_ptr<const StoredPack> pack) {
  if (!backend_->shared()) return pack;
  // The Redis client fails at once while a node is in backoff, so a tier
  // that is down costs a call nothing; the copy in memory is then the best
  // this replica has.
  absl::StatusOr<std::optional<Digest256>> digest = backend_->digest_of(tenant, pack->pack_id);
  if (!digest.ok()) {
    ++backend_errors_;
    return pack;
  }
  if (digest->has_value() && **digest == pack->prefix_digest) return pack;
  ++stale_dropped_;
  (void)memory_->remove(tenant, pack->pack_id);
  if (!digest->has_value()) return std::shared_ptr<const StoredPack>();
  // Replaced by another prefix elsewhere: that one is the pack now.
  absl::StatusOr<std::optional<PackValue>> value = backend_->get_by_id(tenant, pack->pack_id);
  if (!value.ok()) return backend_failed(value.status(), "reading a prefix pack");
  if (!value->has_value()) return std::shared_ptr<const StoredPack>();
  return load(tenant, **value, nullptr);
}

absl::StatusOr<std::shared_ptr<const StoredPack>> PackLibrary::find_by_id(const std::string& tenant,
                                                                         const std::string& pack_id) {
  std::shared_ptr<const StoredPack> pack = memory_->find_by_id(tenant, pack_id);
  if (backend_ == nullptr) return pack;
  if (pack != nullptr) return revalidate(tenant, std::move(pack));
  absl::StatusOr<std::optional<PackValue>> value = backend_->get_by_id(tenant, pack_id);
  if (!value.ok()) return backend_failed(value.status(), "reading a prefix pack");
  if (!value->has_value()) return std::shared_ptr<const StoredPack>();
  return load(tenant, **value, nullptr);
}

absl::StatusOr<std::shared_ptr<const StoredPack>> PackLibrary::find_by_digest(const std::string& tenant,
                                                                             const Digest256& digest) {
  std::shared_ptr<const StoredPack> pack = memory_->find_by_digest(tenant, digest);
  if (backend_ == nullptr) return pack;
  if (pack != nullptr) {
    BATON_ASSIGN_OR_RETURN(pack, revalidate(tenant, std::move(pack)));
    if (pack != nullptr && pack->prefix_digest == digest) return pack;
  }
  absl::StatusOr<std::optional<PackValue>> value = backend_->get_by_digest(tenant, digest);
  if (!value.ok()) return backend_failed(value.status(), "reading a prefix pack");
  if (!value->has_value()) return std::shared_ptr<const StoredPack>();
  return load(tenant, **value, &digest);
}

absl::StatusOr<RemovedPack> PackLibrary::remove(const std::string& tenant, const std::string& pack_id) {
  const absl::Status unknown = absl::NotFoundError(absl::StrFormat("prefix pack '%s' is unknown", pack_id));
  if (backend_ == nullptr) {
    BATON_ASSIGN_OR_RETURN(std::shared_ptr<const StoredPack> removed, memory_->remove(tenant, pack_id));
    return RemovedPack{removed->pack_id, removed->stored_bytes};
  }
  absl::StatusOr<std::optional<uint64_t>> charge = backend_->remove(tenant, pack_id);
  if (!charge.ok()) return backend_failed(charge.status(), "DeletePrefix deleted nothing");
  absl::StatusOr<std::shared_ptr<const StoredPack>> copy = memory_->remove(tenant, pack_id);
  if (!charge->has_value()) return unknown;  // a copy here was stale: deleted elsewhere
  return RemovedPack{pack_id, copy.ok() ? (*copy)->stored_bytes : **charge};
}

absl::StatusOr<RemovedPack> PackLibrary::remove_by_digest(const std::string& tenant, const Digest256& digest) {
  const absl::Status unknown =
      absl::NotFoundError(absl::StrCat("no prefix pack has the prefix digest ", to_hex(digest)));
  if (backend_ == nullptr) {
    BATON_ASSIGN_OR_RETURN(std::shared_ptr<const StoredPack> removed, memory_->remove_by_digest(tenant, digest));
    return RemovedPack{removed->pack_id, removed->stored_bytes};
  }
  absl::StatusOr<std::optional<std::string>> pack_id = backend_->id_of(tenant, digest);
  if (!pack_id.ok()) return backend_failed(pack_id.status(), "DeletePrefix deleted nothing");
  if (!pack_id->has_value()) {
    (void)memory_->remove_by_digest(tenant, digest);  // a stale copy, if any
    return unknown;
  }
  return remove(tenant, **pack_id);
}

PackLibraryStats PackLibrary::stats() const {
  return PackLibraryStats{loads_.load(), rejected_values_.load(), stale_dropped_.load(), backend_errors_.load()};
}

}  // namespace baton
