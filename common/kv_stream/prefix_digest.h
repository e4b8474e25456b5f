// Token-prefix digest (DESIGN.md "KV stream format"): identifies the whole
// token prefix [0, end) a KV segment belongs to, since KV at position p depends
// on every token before p.
//
// The digest is chained over fixed blocks of kPrefixDigestBlockTokens tokens so
// that a prefix cache can key KV by block digest, and two prompts sharing their
// leading blocks share those block digests:
//   d_0     = SHA-256("baton-prefix/1")
//   d_{i+1} = SHA-256(d_i || ids of block i)            (block i = tokens [64 i, 64 i + 64))
//   prefix_digest(tokens[0, n)) = d_{n/64}               when n % 64 == 0 (d_0 for n == 0)
//                               = SHA-256(d_{n/64} || the n % 64 remaining ids
//                                         || n as u64 || 0x01)   otherwise
// Ids are little-endian u32. The tail input ends with one odd byte so that it
// never has the 288-byte length of a chain step: a tail can never be mistaken
// for a chain step whose last ids happen to spell the count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/util/sha256.h"

namespace baton {

// Tokens per chained block (part of the digest definition: changing it
// changes every digest).
inline constexpr int64_t kPrefixDigestBlockTokens = 64;
// The domain string hashed for d_0.
inline constexpr char kPrefixDigestDomain[] = "baton-prefix/1";

// d_0: the digest of the empty prefix.
Digest256 prefix_digest_seed();

// Digest of tokens [0, tokens.size()).
Digest256 prefix_digest(std::span<const int32_t> tokens);

// Chain digests d_1 .. d_k of the k = tokens.size() / 64 full blocks:
// result[i] is the digest of the prefix [0, 64 (i + 1)).
std::vector<Digest256> prefix_block_digests(std::span<const int32_t> tokens);

// Incremental form: append tokens in any pieces, read digest() at any point.
// digest() after appending t equals prefix_digest(t).
class PrefixDigester {
 public:
  PrefixDigester();

  void append(std::span<const int32_t> tokens);
  void append(int32_t token) { append(std::span<const int32_t>(&token, 1)); }

  // Digest of everything appended so far.
  Digest256 digest() const;
  // Tokens appended so far.
  int64_t token_count() const { return token_count_; }
  // d_1 .. d_k for the full blocks appended so far (see prefix_block_digests).
  const std::vector<Digest256>& block_digests() const { return block_digests_; }
  // d_k: the digest of the longest block-aligned prefix appended so far.
  const Digest256& chain_digest() const { return chain_; }

 private:
  Digest256 chain_;                    // d_k for the full blocks so far
  std::vector<Digest256> block_digests_;
  std::vector<int32_t> pending_;       // ids of the open block, < 64 of them
  int64_t token_count_ = 0;
};

}  // namespace baton
