#include "cloud_prefill/prefix_pack_store.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace baton {

std::vector<v1::KvStreamMessage> kv_stream_messages(KvSegment segment) {
  std::vector<v1::KvStreamMessage> out;
  out.reserve(segment.blocks.size() + 2);
  *out.emplace_back().mutable_header() = std::move(segment.header);
  for (KvStagedBlock& staged : segment.blocks) {
    v1::KvBlock* block = out.emplace_back().mutable_block();
    block->set_layer(staged.layer);
    block->set_kind(staged.kind);
    block->set_token_begin(staged.token_begin);
    block->set_token_count(staged.token_count);
    block->set_encoded_size(staged.payload.size());
    block->set_payload(std::move(staged.payload));
    block->set_raw_size(staged.raw_size);
    block->set_checksum(staged.checksum);
  }
  *out.emplace_back().mutable_trailer() = std::move(segment.trailer);
  return out;
}

PrefixPackStore::Reservation& PrefixPackStore::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    release();
    store_ = std::exchange(other.store_, nullptr);
    tenant_ = std::move(other.tenant_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PrefixPackStore::Reservation::release() {
  if (store_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(store_->mu_);
    store_->reserved_ -= bytes_;
    store_->tenant_bytes_[tenant_] -= bytes_;
  }
  store_ = nullptr;
  bytes_ = 0;
}

PrefixPackStore::PrefixPackStore(uint64_t max_bytes, uint64_t tenant_quota_bytes, bool evictable)
    : max_bytes_(max_bytes), tenant_quota_bytes_(tenant_quota_bytes), evictable_(evictable) {}

absl::Status PrefixPackStore::make_room_locked(const std::string& tenant, uint64_t bytes) {
  // Reservations are never evicted: only stored packs can make room.
  while (evictable_ && !packs_.empty() && bytes <= max_bytes_ && bytes_ + reserved_ > max_bytes_ - bytes) {
    auto oldest = packs_.begin();
    for (auto it = packs_.begin(); it != packs_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    erase_locked(oldest);
    ++evictions_;
  }
  return check_room_locked(tenant, bytes);
}

std::shared_ptr<const StoredPack> PrefixPackStore::use_locked(const Entry& entry) const {
  entry.last_used = ++use_clock_;
  return entry.pack;
}

absl::Status PrefixPackStore::check_room_locked(const std::string& tenant, uint64_t bytes) const {
  const uint64_t used = bytes_ + reserved_;
  if (bytes > max_bytes_ || used > max_bytes_ - bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the prefix pack store is full: the pack needs %d bytes, %d of %d are used or reserved (--pack-store); "
        "delete packs (DeletePrefix) or retry later",
        bytes, used, max_bytes_));
  }
  if (tenant_quota_bytes_ > 0) {
    auto it = tenant_bytes_.find(tenant);
    const uint64_t tenant_used = it == tenant_bytes_.end() ? 0 : it->second;
    if (bytes > tenant_quota_bytes_ || tenant_used > tenant_quota_bytes_ - bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "tenant %s's pack quota is full: the pack needs %d bytes, %d of %d are used or reserved (--pack-quota); "
          "delete packs (DeletePrefix) first",
          tenant, bytes, tenant_used, tenant_quota_bytes_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PrefixPackStore::Reservation> PrefixPackStore::reserve(const std::string& tenant, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status room = make_room_locked(tenant, bytes); !room.ok()) return room;
  reserved_ += bytes;
  tenant_bytes_[tenant] += bytes;
  Reservation reservation;
  reservation.store_ = this;
  reservation.tenant_ = tenant;
  reservation.bytes_ = bytes;
  return reservation;
}

absl::StatusOr<PutPackResult> PrefixPackStore::put(const std::string& tenant, std::shared_ptr<StoredPack> pack,
                                                   Reservation* reservation) {
  std::lock_guard<std::mutex> lock(mu_);
  // The reservation's bytes are this pack's: free them for the check below.
  if (reservation != nullptr && reservation->store_ == this) {
    reserved_ -= reservation->bytes_;
    tenant_bytes_[reservation->tenant_] -= reservation->bytes_;
    reservation->store_ = nullptr;
    reservation->bytes_ = 0;
  }
  auto key = std::make_pair(tenant, pack->pack_id);
  if (auto it = packs_.find(key); it != packs_.end()) {
    if (it->second.pack->prefix_digest == pack->prefix_digest) return PutPackResult{use_locked(it->second), true};
    if (!evictable_) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "pack '%s' already holds a different prefix (%d tokens); choose another pack_id", pack->pack_id,
          it->second.pack->tokens.size()));
    }
    erase_locked(it);  // a stale copy: the durable backend took the new prefix
  }
  if (absl::Status room = make_room_locked(tenant, pack->stored_bytes); !room.ok()) return room;
  bytes_ += pack->stored_bytes;
  tenant_bytes_[tenant] += pack->stored_bytes;
  std::shared_ptr<const StoredPack> stored = std::move(pack);
  packs_.emplace(std::move(key), Entry{stored, ++use_clock_});
  return PutPackResult{std::move(stored), false};
}

std::shared_ptr<const StoredPack> PrefixPackStore::erase_locked(Packs::iterator it) {
  std::shared_ptr<const StoredPack> pack = std::move(it->second.pack);
  bytes_ -= pack->stored_bytes;
  uint64_t& tenant_used = tenant_bytes_[it->first.first];
  tenant_used -= pack->stored_bytes;
  if (tenant_used == 0) tenant_bytes_.erase(it->first.first);
  packs_.erase(it);
  return pack;
}

absl::StatusOr<std::shared_ptr<const StoredPack>> PrefixPackStore::remove(const std::string& tenant,
                                                                          const std::string& pack_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = packs_.find(std::make_pair(tenant, pack_id));
  if (it == packs_.end()) return absl::NotFoundError(absl::StrFormat("prefix pack '%s' is unknown", pack_id));
  return erase_locked(it);
}

absl::StatusOr<std::shared_ptr<const StoredPack>> PrefixPackStore::remove_by_digest(const std::string& tenant,
                                                                                    const Digest256& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = packs_.lower_bound(std::make_pair(tenant, std::string())); it != packs_.end(); ++it) {
    if (it->first.first != tenant) break;
    if (it->second.pack->prefix_digest == digest) return erase_locked(it);
  }
  return absl::NotFoundError(absl::StrFormat("no prefix pack has the prefix digest %s", to_hex(digest)));
}

std::shared_ptr<const StoredPack> PrefixPackStore::find_by_id(const std::string& tenant,
                                                              const std::string& pack_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = packs_.find(std::make_pair(tenant, pack_id));
  return it == packs_.end() ? nullptr : use_locked(it->second);
}

std::shared_ptr<const StoredPack> PrefixPackStore::find_by_digest(const std::string& tenant,
                                                                  const Digest256& digest) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = packs_.lower_bound(std::make_pair(tenant, std::string())); it != packs_.end(); ++it) {
    if (it->first.first != tenant) break;
    if (it->second.pack->prefix_digest == digest) return use_locked(it->second);
  }
  return nullptr;
}

uint64_t PrefixPackStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t PrefixPackStore::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

uint64_t PrefixPackStore::tenant_bytes(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenant_bytes_.find(tenant);
  return it == tenant_bytes_.end() ? 0 : it->second;
}

uint64_t PrefixPackStore::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}

size_t PrefixPackStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return packs_.size();
}

}  // namespace baton
