#include "cloud_prefill/prefix_pack_store.h"

#include "absl/strings/str_format.h"

namespace baton {

std::vector<v1::KvStreamMessage> StoredPack::messages() const {
  std::vector<v1::KvStreamMessage> out;
  out.reserve(segment.blocks.size() + 2);
  *out.emplace_back().mutable_header() = segment.header;
  for (const KvStagedBlock& staged : segment.blocks) {
    v1::KvBlock* block = out.emplace_back().mutable_block();
    block->set_layer(staged.layer);
    block->set_kind(staged.kind);
    block->set_token_begin(staged.token_begin);
    block->set_token_count(staged.token_count);
    block->set_payload(staged.payload);
    block->set_encoded_size(staged.payload.size());
    block->set_raw_size(staged.raw_size);
    block->set_checksum(staged.checksum);
  }
  *out.emplace_back().mutable_trailer() = segment.trailer;
  return out;
}

PrefixPackStore::PrefixPackStore(uint64_t max_bytes) : max_bytes_(max_bytes) {}

absl::StatusOr<PutPackResult> PrefixPackStore::put(const std::string& tenant, std::shared_ptr<StoredPack> pack) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(tenant, pack->pack_id);
  if (auto it = packs_.find(key); it != packs_.end()) {
    if (it->second->prefix_digest == pack->prefix_digest) return PutPackResult{it->second, true};
    return absl::AlreadyExistsError(absl::StrFormat(
        "pack '%s' already holds a different prefix (%d tokens); choose another pack_id", pack->pack_id,
        it->second->tokens.size()));
  }
  if (bytes_ + pack->stored_bytes > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the prefix pack store is full: the pack needs %d bytes, %d of %d are used", pack->stored_bytes, bytes_,
        max_bytes_));
  }
  bytes_ += pack->stored_bytes;
  std::shared_ptr<const StoredPack> stored = std::move(pack);
  packs_.emplace(std::move(key), stored);
  return PutPackResult{std::move(stored), false};
}

std::shared_ptr<const StoredPack> PrefixPackStore::find_by_id(const std::string& tenant,
                                                              const std::string& pack_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = packs_.find(std::make_pair(tenant, pack_id));
  return it == packs_.end() ? nullptr : it->second;
}

std::shared_ptr<const StoredPack> PrefixPackStore::find_by_digest(const std::string& tenant,
                                                                  const Digest256& digest) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = packs_.lower_bound(std::make_pair(tenant, std::string())); it != packs_.end(); ++it) {
    if (it->first.first != tenant) break;
    if (it->second->prefix_digest == digest) return it->second;
  }
  return nullptr;
}

uint64_t PrefixPackStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t PrefixPackStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return packs_.size();
}

}  // namespace baton
