// PrefixPackStore on its own (cloud_prefill/prefix_pack_store.h), beyond the
// quota and reservation cases of resource_caps_test.cc: the same prefix
// again is a no-op and another prefix under a taken id is refused; the
// store's cap refuses with the numbers and never wraps; lookups see only the
// caller's packs; a removed pack lives on for its holders; a reservation is
// released exactly once, also when its put fails; kv_stream_messages keeps
// the stream's order.
#include "cloud_prefill/prefix_pack_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>

namespace baton {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<StoredPack> pack_of(const std::string& id, uint64_t bytes, uint8_t digest_byte) {
  auto pack = std::make_shared<StoredPack>();
  pack->pack_id = id;
  pack->prefix_digest.fill(digest_byte);
  pack->tokens = {1, 2, 3};
  pack->stored_bytes = bytes;
  return pack;
}

Digest256 digest_of(uint8_t byte) {
  Digest256 d;
  d.fill(byte);
  return d;
}

TEST(PrefixPackStoreTest, TheSamePrefixAgainIsANoOpAndAnotherPrefixUnderATakenIdIsRefused) {
  PrefixPackStore store(1000, 0);
  auto first = store.put("alice", pack_of("sys", 300, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->already_present);
  auto again = store.put("alice", pack_of("sys", 300, 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_present);
  EXPECT_EQ(again->pack, first->pack) << "the stored pack is returned, not the new copy";
  EXPECT_EQ(store.bytes(), 300u);
  EXPECT_EQ(store.size(), 1u);

  auto other = store.put("alice", pack_of("sys", 300, 2));
  ASSERT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("pack 'sys' already holds a different prefix"));
  EXPECT_EQ(store.find_by_id("alice", "sys")->prefix_digest, digest_of(1));
}

TEST(PrefixPackStoreTest, TheStoresCapRefusesWithTheNumbersAndStoresNothing) {
  PrefixPackStore store(1000, 0);
  ASSERT_TRUE(store.put("alice", pack_of("a", 600, 1)).ok());
  auto over = store.put("bob", pack_of("b", 500, 2));
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("needs 500 bytes, 600 of 1000 are used or reserved"));
  EXPECT_EQ(store.find_by_id("bob", "b"), nullptr);
  EXPECT_EQ(store.bytes(), 600u);
  EXPECT_EQ(store.tenant_bytes("bob"), 0u);
  EXPECT_TRUE(store.put("bob", pack_of("b", 400, 2)).ok()) << "exactly full fits";
  EXPECT_EQ(store.bytes(), 1000u);
}

TEST(PrefixPackStoreTest, AHugeRequestIsRefusedWithoutWrappingAround) {
  PrefixPackStore store(1000, 0);  // no quota: the store's own check must hold
  ASSERT_TRUE(store.put("alice", pack_of("a", 100, 1)).ok());
  const uint64_t huge = std::numeric_limits<uint64_t>::max() - 50;
  EXPECT_EQ(store.reserve("alice", huge).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.put("alice", pack_of("b", huge, 2)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.reserved_bytes(), 0u);
  EXPECT_EQ(store.bytes(), 100u);
}

TEST(PrefixPackStoreTest, LookupsByIdAndByDigestSeeOnlyTheCallersPacks) {
  PrefixPackStore store(1000, 0);
  ASSERT_TRUE(store.put("alice", pack_of("p", 100, 7)).ok());
  EXPECT_NE(store.find_by_id("alice", "p"), nullptr);
  EXPECT_NE(store.find_by_digest("alice", digest_of(7)), nullptr);
  EXPECT_EQ(store.find_by_id("bob", "p"), nullptr);
  EXPECT_EQ(store.find_by_digest("bob", digest_of(7)), nullptr);
  EXPECT_EQ(store.find_by_digest("alice", digest_of(8)), nullptr);
  // A tenant whose name starts like another's is another tenant.
  EXPECT_EQ(store.find_by_digest("alic", digest_of(7)), nullptr);
  EXPECT_EQ(store.find_by_digest("alice2", digest_of(7)), nullptr);
}

TEST(PrefixPackStoreTest, ARemovedPackLivesOnForCallsStillHoldingIt) {
  PrefixPackStore store(1000, 0);
  ASSERT_TRUE(store.put("alice", pack_of("p", 100, 1)).ok());
  std::shared_ptr<const StoredPack> held = store.find_by_id("alice", "p");
  ASSERT_NE(held, nullptr);
  auto removed = store.remove("alice", "p");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, held);
  EXPECT_EQ(store.find_by_id("alice", "p"), nullptr);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(held->tokens, (std::vector<int32_t>{1, 2, 3}));
  auto twice = store.remove("alice", "p");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("prefix pack 'p' is unknown"));
}

TEST(PrefixPackStoreTest, AMovedReservationIsReleasedExactlyOnce) {
  PrefixPackStore store(1000, 0);
  auto first = store.reserve("alice", 300);
  ASSERT_TRUE(first.ok());
  {
    PrefixPackStore::Reservation moved = std::move(*first);
    EXPECT_EQ(moved.bytes(), 300u);
    EXPECT_EQ(first->bytes(), 0u);
    first->release();  // the moved-from one holds nothing
    EXPECT_EQ(store.reserved_bytes(), 300u);
    // Assigning over a live reservation releases the old one.
    auto second = store.reserve("alice", 200);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(store.reserved_bytes(), 500u);
    moved = std::move(*second);
    EXPECT_EQ(store.reserved_bytes(), 200u);
    EXPECT_EQ(store.tenant_bytes("alice"), 200u);
  }
  EXPECT_EQ(store.reserved_bytes(), 0u);
  EXPECT_EQ(store.tenant_bytes("alice"), 0u);
}

TEST(PrefixPackStoreTest, APutThatFailsStillReleasesItsReservation) {
  PrefixPackStore store(1000, 0);
  auto upload = store.reserve("alice", 300);
  ASSERT_TRUE(upload.ok());
  // The stream grew past what its header declared and past the store.
  auto failed = store.put("alice", pack_of("p", 2000, 1), &*upload);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(upload->bytes(), 0u);
  EXPECT_EQ(store.reserved_bytes(), 0u);
  EXPECT_EQ(store.tenant_bytes("alice"), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(PrefixPackStoreTest, KvStreamMessagesAreHeaderBlocksInOrderThenTrailer) {
  KvSegment segment;
  segment.header.set_token_count(3);
  for (uint32_t layer = 0; layer < 2; ++layer) {
    KvStagedBlock block;
    block.layer = layer;
    block.kind = v1::KV_KIND_V;
    block.token_begin = 5;
    block.token_count = 3;
    block.raw_size = 12;
    block.checksum = 40 + layer;
    block.payload = "payload-" + std::to_string(layer);
    segment.blocks.push_back(std::move(block));
  }
  segment.trailer.set_block_count(2);
  const std::vector<v1::KvStreamMessage> messages = kv_stream_messages(std::move(segment));
  ASSERT_EQ(messages.size(), 4u);
  ASSERT_TRUE(messages[0].has_header());
  EXPECT_EQ(messages[0].header().token_count(), 3u);
  for (uint32_t layer = 0; layer < 2; ++layer) {
    const v1::KvStreamMessage& m = messages[1 + layer];
    ASSERT_TRUE(m.has_block());
    EXPECT_EQ(m.block().layer(), layer);
    EXPECT_EQ(m.block().kind(), v1::KV_KIND_V);
    EXPECT_EQ(m.block().token_begin(), 5u);
    EXPECT_EQ(m.block().token_count(), 3u);
    EXPECT_EQ(m.block().raw_size(), 12u);
    EXPECT_EQ(m.block().checksum(), 40u + layer);
    EXPECT_EQ(m.block().payload(), "payload-" + std::to_string(layer));
    EXPECT_EQ(m.block().encoded_size(), m.block().payload().size());
  }
  ASSERT_TRUE(messages[3].has_trailer());
  EXPECT_EQ(messages[3].trailer().block_count(), 2u);
}

}  // namespace
}  // namespace baton
