// Memory caps checked before memory is spent (issue 15, "memory caps for
// every untrusted length"): a KV stream's header is checked by the
// receiver's own hook before any block is read; the cloud's byte budgets
// (MemoryAdmission for Prefill requests, PrefixPackStore's store cap and
// per-tenant quota with upload reservations and DeletePrefix) refuse with the
// numbers and change nothing when they refuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cloud_prefill/memory_admission.h"
#include "cloud_prefill/prefix_pack_store.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

class StreamHeaderCheckTest : public testing::TinyModelTest {
 protected:
  // A valid header of `n` tokens from position 0 (no blocks need follow for
  // the header to verify).
  v1::KvStreamMessage header(int n, const std::string& codec) const {
    KvStreamHeaderInfo info;
    info.model = fingerprint_;
    auto config = parse_kv_codec_config(codec);
    EXPECT_TRUE(config.ok());
    info.codec = *config;
    for (int i = 0; i < n; ++i) info.token_ids.push_back((i * 13 + 5) % 500);
    info.prefix_digest = prefix_digest(info.token_ids);
    auto made = make_kv_header(info);
    EXPECT_TRUE(made.ok()) << made.status();
    v1::KvStreamMessage message;
    *message.mutable_header() = *made;
    message.mutable_header()->set_format_version(kKvStreamFormatVersion);
    return message;
  }
};

TEST_F(StreamHeaderCheckTest, HeaderRawBytesAreTokenCountTimesTheCodecsBytesPerToken) {
  const v1::KvStreamMessage m = header(100, "int8-g16");
  auto raw = kv_header_raw_bytes(m.header(), geometry_);
  ASSERT_TRUE(raw.ok()) << raw.status();
  auto config = parse_kv_codec_config("int8-g16");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(*raw, static_cast<uint64_t>(std::ceil(100 * kv_raw_bytes_per_token(*config, geometry_))));
  EXPECT_GT(*raw, 0u);
}

TEST_F(StreamHeaderCheckTest, HookSeesTheVerifiedHeaderAndItsRefusalFailsTheStreamAtTheHeader) {
  KvStreamExpectation expected;
  expected.model = fingerprint_;
  int calls = 0;
  KvStreamReaderOptions options;
  options.check_header = [&](const v1::KvHeader& h) {
    ++calls;
    return h.token_count() > 50 ? absl::ResourceExhaustedError("too many tokens for the budget") : absl::OkStatus();
  };
  KvStreamReader small(expected, kv_reader_options_with_codec(geometry_, options));
  EXPECT_TRUE(small.consume(header(20, "int8-g16")).ok());
  EXPECT_EQ(calls, 1);
  KvStreamReader big(expected, kv_reader_options_with_codec(geometry_, options));
  const absl::Status refused = big.consume(header(2000, "int8-g16"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(big.commit().status().code(), absl::StatusCode::kResourceExhausted);  // sticky
  // A header that fails the reader's own checks never reaches the hook.
  v1::KvStreamMessage lying = header(20, "int8-g16");
  lying.mutable_header()->set_token_count(21);
  KvStreamReader bad(expected, kv_reader_options_with_codec(geometry_, options));
  EXPECT_FALSE(bad.consume(lying).ok());
  EXPECT_EQ(calls, 2);
}

// --- MemoryAdmission -------------------------------------------------------

TEST(MemoryAdmissionTest, ReservesUpToTheLimitAndRefusesWithTheNumbers) {
  MemoryAdmission admission(1000);
  auto a = admission.reserve(600, "request a");
  ASSERT_TRUE(a.ok());
  auto b = admission.reserve(500, "request b");
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("request b needs 500 bytes"));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("600 of 1000 are reserved"));
  EXPECT_EQ(admission.in_use_bytes(), 600u);  // a refusal reserves nothing
  {
    auto c = admission.reserve(400, "request c");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(admission.in_use_bytes(), 1000u);
  }
  EXPECT_EQ(admission.in_use_bytes(), 600u);  // released with the ticket
  MemoryAdmission::Ticket moved = std::move(*a);
  EXPECT_EQ(admission.in_use_bytes(), 600u);
  moved.release();
  EXPECT_EQ(admission.in_use_bytes(), 0u);
  EXPECT_EQ(admission.high_water_bytes(), 1000u);
  EXPECT_EQ(admission.reserve(1001, "huge").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(admission.reserve(~uint64_t{0}, "overflow").status().code(), absl::StatusCode::kResourceExhausted);
}

// --- PrefixPackStore: cap, quota, reservations, delete ------------------------

std::shared_ptr<StoredPack> pack_of(const std::string& id, uint64_t bytes, uint8_t digest_byte) {
  auto pack = std::make_shared<StoredPack>();
  pack->pack_id = id;
  pack->prefix_digest.fill(digest_byte);
  pack->tokens = {1, 2, 3};
  pack->stored_bytes = bytes;
  return pack;
}

TEST(PrefixPackStoreTest, TenantQuotaRefusesWithTheNumbersAndLeavesOtherTenantsRoom) {
  PrefixPackStore store(1000, 400);
  ASSERT_TRUE(store.put("alpha", pack_of("a1", 300, 1)).ok());
  auto over = store.put("alpha", pack_of("a2", 200, 2));
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("tenant alpha's pack quota is full"));
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("needs 200 bytes, 300 of 400"));
  EXPECT_EQ(store.find_by_id("alpha", "a2"), nullptr);
  EXPECT_TRUE(store.put("beta", pack_of("a2", 400, 2)).ok());  // beta's quota is its own
  EXPECT_EQ(store.bytes(), 700u);
}

TEST(PrefixPackStoreTest, ReservationsCountUntilPutTakesThemOverOrTheyAreDropped) {
  PrefixPackStore store(1000, 0);
  auto upload = store.reserve("alpha", 800);
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ(store.reserved_bytes(), 800u);
  // A concurrent upload cannot take the reserved bytes.
  auto second = store.reserve("beta", 300);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("800 of 1000 are used or reserved"));
  // The upload stores less than it reserved: the rest is free again.
  ASSERT_TRUE(store.put("alpha", pack_of("p", 700, 1), &*upload).ok());
  EXPECT_EQ(upload->bytes(), 0u);
  EXPECT_EQ(store.reserved_bytes(), 0u);
  EXPECT_EQ(store.bytes(), 700u);
  EXPECT_EQ(store.tenant_bytes("alpha"), 700u);
  {
    auto failed = store.reserve("beta", 300);  // an upload that fails: dropped
    ASSERT_TRUE(failed.ok());
    EXPECT_EQ(store.tenant_bytes("beta"), 300u);
  }
  EXPECT_EQ(store.reserved_bytes(), 0u);
  EXPECT_EQ(store.tenant_bytes("beta"), 0u);
}

TEST(PrefixPackStoreTest, RemoveDeletesOnlyTheCallersPackAndFreesItsBytes) {
  PrefixPackStore store(1000, 500);
  ASSERT_TRUE(store.put("alpha", pack_of("shared", 400, 1)).ok());
  ASSERT_TRUE(store.put("beta", pack_of("shared", 300, 2)).ok());
  EXPECT_EQ(store.put("alpha", pack_of("more", 200, 3)).status().code(), absl::StatusCode::kResourceExhausted);
  // Unknown for gamma, whatever alpha and beta hold.
  EXPECT_EQ(store.remove("gamma", "shared").status().code(), absl::StatusCode::kNotFound);
  Digest256 beta_digest{};
  beta_digest.fill(2);
  EXPECT_EQ(store.remove_by_digest("alpha", beta_digest).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.bytes(), 700u);
  auto removed = store.remove("alpha", "shared");
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ((*removed)->stored_bytes, 400u);
  EXPECT_EQ(store.find_by_id("alpha", "shared"), nullptr);
  EXPECT_NE(store.find_by_id("beta", "shared"), nullptr);
  EXPECT_EQ(store.tenant_bytes("alpha"), 0u);
  EXPECT_TRUE(store.put("alpha", pack_of("more", 200, 3)).ok());  // the quota is free again
  auto by_digest = store.remove_by_digest("beta", beta_digest);
  ASSERT_TRUE(by_digest.ok());
  EXPECT_EQ((*by_digest)->pack_id, "shared");
  EXPECT_EQ(store.bytes(), 200u);
  EXPECT_EQ(store.remove("beta", "shared").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton
