#include "common/kv_stream/prefix_digest.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

namespace baton {
namespace {

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 32000);
  return tokens;
}

// The formula of prefix_digest.h, written out independently.
void hash_ids_le(Sha256& h, const int32_t* ids, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    const uint8_t le[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
                           static_cast<uint8_t>(v >> 24)};
    h.update(le, 4);
  }
}

Digest256 formula_digest(const std::vector<int32_t>& tokens) {
  Digest256 d = sha256("baton-prefix/1");
  size_t i = 0;
  for (; i + 64 <= tokens.size(); i += 64) {
    Sha256 h;
    h.update(d.data(), d.size());
    hash_ids_le(h, tokens.data() + i, 64);
    d = h.finish();
  }
  if (i == tokens.size()) return d;
  Sha256 h;
  h.update(d.data(), d.size());
  hash_ids_le(h, tokens.data() + i, tokens.size() - i);
  h.update_u64(tokens.size());
  const uint8_t marker = 1;
  h.update(&marker, 1);
  return h.finish();
}

TEST(PrefixDigest, BlockSizeIs64Tokens) { EXPECT_EQ(kPrefixDigestBlockTokens, 64); }

TEST(PrefixDigest, EmptyPrefixIsTheSeed) {
  EXPECT_EQ(prefix_digest({}), sha256("baton-prefix/1"));
  EXPECT_EQ(prefix_digest({}), prefix_digest_seed());
}

TEST(PrefixDigest, MatchesTheFormulaForAlignedAndUnalignedLengths) {
  const std::vector<int32_t> tokens = random_tokens(300, 1);
  for (size_t n : {1, 2, 63, 64, 65, 127, 128, 129, 200, 256, 300}) {
    std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_EQ(prefix_digest(prefix), formula_digest(prefix)) << n << " tokens";
  }
}

TEST(PrefixDigest, GoldenValueForTokens0To99) {
  // Computed with the formula above (and independently with Python hashlib:
  // d0 = sha256(b"baton-prefix/1"); d1 = sha256(d0 + ids[0:64] as <u4);
  // sha256(d1 + ids[64:100] as <u4 + (100).to_bytes(8, "little") + b"\x01")).
  std::vector<int32_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 0);
  EXPECT_EQ(to_hex(prefix_digest(tokens)), to_hex(formula_digest(tokens)));
  EXPECT_EQ(to_hex(prefix_digest(tokens)), "6c6c10685ac54b58888377dac6f94cf5f100d84097452218991c967598469f32");
}

TEST(PrefixDigest, IncrementalEqualsWholeAtEveryLength) {
  const std::vector<int32_t> tokens = random_tokens(333, 2);
  PrefixDigester digester;
  std::mt19937 rng(3);
  size_t at = 0;
  EXPECT_EQ(digester.digest(), prefix_digest({}));
  while (at < tokens.size()) {
    const size_t n = std::min<size_t>(tokens.size() - at, rng() % 80);
    digester.append(std::span<const int32_t>(tokens.data() + at, n));
    at += n;
    EXPECT_EQ(digester.token_count(), static_cast<int64_t>(at));
    EXPECT_EQ(digester.digest(), prefix_digest(std::span<const int32_t>(tokens.data(), at))) << at;
  }
  PrefixDigester one_by_one;
  for (int32_t t : tokens) one_by_one.append(t);
  EXPECT_EQ(one_by_one.digest(), digester.digest());
  EXPECT_EQ(one_by_one.block_digests(), digester.block_digests());
}

TEST(PrefixDigest, BlockDigestsAreDigestsOfAlignedPrefixes) {
  const std::vector<int32_t> tokens = random_tokens(200, 4);
  const std::vector<Digest256> blocks = prefix_block_digests(tokens);
  ASSERT_EQ(blocks.size(), 3u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i], prefix_digest(std::span<const int32_t>(tokens.data(), 64 * (i + 1))));
  }
}

TEST(PrefixDigest, PromptsSharingLeadingBlocksShareTheirBlockDigests) {
  std::vector<int32_t> a = random_tokens(300, 5);
  std::vector<int32_t> b = a;
  b[150] += 1;  // differs inside block 2
  b.resize(280);
  const std::vector<Digest256> da = prefix_block_digests(a), db = prefix_block_digests(b);
  ASSERT_EQ(da.size(), 4u);
  ASSERT_EQ(db.size(), 4u);
  EXPECT_EQ(da[0], db[0]);
  EXPECT_EQ(da[1], db[1]);
  EXPECT_NE(da[2], db[2]);
  EXPECT_NE(da[3], db[3]);
}

TEST(PrefixDigest, ChangesWhenAnyTokenChanges) {
  const std::vector<int32_t> tokens = random_tokens(130, 6);
  const Digest256 base = prefix_digest(tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<int32_t> changed = tokens;
    changed[i] ^= 1;
    EXPECT_NE(prefix_digest(changed), base) << "token " << i;
  }
  std::vector<int32_t> longer = tokens;
  longer.push_back(0);
  EXPECT_NE(prefix_digest(longer), base);
}

TEST(PrefixDigest, TailNeverCollidesWithAChainStep) {
  // A 62-token tail followed by a u64 count would have a chain step's length
  // without the marker byte: [.. 62 ids] vs [.. 62 ids, count, 0].
  std::vector<int32_t> a = random_tokens(62, 7);
  std::vector<int32_t> b = a;
  b.push_back(62);
  b.push_back(0);
  EXPECT_NE(prefix_digest(a), prefix_digest(b));
}

}  // namespace
}  // namespace baton
