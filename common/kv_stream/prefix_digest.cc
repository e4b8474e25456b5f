#include "common/kv_stream/prefix_digest.h"

#include <algorithm>
#include <cstring>

namespace baton {
namespace {

void update_ids(Sha256& h, std::span<const int32_t> ids) {
  uint8_t buf[4 * kPrefixDigestBlockTokens];
  size_t n = 0;
  for (int32_t id : ids) {
    const uint32_t v = static_cast<uint32_t>(id);
    buf[n++] = static_cast<uint8_t>(v);
    buf[n++] = static_cast<uint8_t>(v >> 8);
    buf[n++] = static_cast<uint8_t>(v >> 16);
    buf[n++] = static_cast<uint8_t>(v >> 24);
    if (n == sizeof(buf)) {
      h.update(buf, n);
      n = 0;
    }
  }
  if (n > 0) h.update(buf, n);
}

// d_{i+1} from d_i and the 64 ids of block i.
Digest256 chain_step(const Digest256& previous, std::span<const int32_t> block) {
  Sha256 h;
  h.update(previous.data(), previous.size());
  update_ids(h, block);
  return h.finish();
}

// The digest of a prefix that ends inside an open block.
Digest256 tail_digest(const Digest256& chain, std::span<const int32_t> tail, int64_t total_tokens) {
  Sha256 h;
  h.update(chain.data(), chain.size());
  update_ids(h, tail);
  h.update_u64(static_cast<uint64_t>(total_tokens));
  const uint8_t tail_marker = 0x01;
  h.update(&tail_marker, 1);
  return h.finish();
}

}  // namespace

Digest256 prefix_digest_seed() { return sha256(kPrefixDigestDomain); }

Digest256 prefix_digest(std::span<const int32_t> tokens) {
  PrefixDigester digester;
  digester.append(tokens);
  return digester.digest();
}

std::vector<Digest256> prefix_block_digests(std::span<const int32_t> tokens) {
  PrefixDigester digester;
  digester.append(tokens);
  return digester.block_digests();
}

PrefixDigester::PrefixDigester() : chain_(prefix_digest_seed()) {
  pending_.reserve(kPrefixDigestBlockTokens);
}

void PrefixDigester::append(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    const size_t room = static_cast<size_t>(kPrefixDigestBlockTokens) - pending_.size();
    const size_t take = std::min(room, tokens.size());
    if (pending_.empty() && take == static_cast<size_t>(kPrefixDigestBlockTokens)) {
      chain_ = chain_step(chain_, tokens.first(take));  // whole block, no copy
      block_digests_.push_back(chain_);
    } else {
      pending_.insert(pending_.end(), tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(take));
      if (pending_.size() == static_cast<size_t>(kPrefixDigestBlockTokens)) {
        chain_ = chain_step(chain_, pending_);
        block_digests_.push_back(chain_);
        pending_.clear();
      }
    }
    token_count_ += static_cast<int64_t>(take);
    tokens = tokens.subspan(take);
  }
}

Digest256 PrefixDigester::digest() const {
  if (pending_.empty()) return chain_;
  return tail_digest(chain_, pending_, token_count_);
}

}  // namespace baton
