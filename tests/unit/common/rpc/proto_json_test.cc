// --json outputs (common/rpc/proto_json.h): 64-bit integers as JSON
// numbers, digests as hex (protobuf's own printer writes int64 as strings
// and bytes as base64).
#include "common/rpc/proto_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "proto/baton.pb.h"

namespace baton {
namespace {

TEST(ProtoJsonTest, SixtyFourBitIntegersAreNumbers) {
  v1::SessionInfo info;
  info.set_session_id("s1");
  info.set_token_count(667);
  info.set_kv_bytes(uint64_t{5} << 32);
  info.set_created_unix_ms(1764604800123);
  const nlohmann::json json = nlohmann::json::parse(proto_to_json(info));
  ASSERT_TRUE(json["kv_bytes"].is_number_unsigned()) << json.dump();
  EXPECT_EQ(json["kv_bytes"].get<uint64_t>(), uint64_t{5} << 32);
  ASSERT_TRUE(json["created_unix_ms"].is_number_integer()) << json.dump();
  EXPECT_EQ(json["created_unix_ms"].get<int64_t>(), 1764604800123);
  EXPECT_EQ(json["last_used_unix_ms"], 0);  // zero values printed too
  EXPECT_EQ(json["token_count"], 667);
}

TEST(ProtoJsonTest, DigestsAreHexAsInEveryTable) {
  v1::SessionInfo info;
  info.set_prefix_digest(std::string("\xba\xaa\x88\x5b\x00\xff", 6));
  v1::KvTrailer trailer;
  trailer.set_stream_digest(0x0123456789abcdefULL);
  trailer.set_encoded_bytes(130000);
  const nlohmann::json session = nlohmann::json::parse(proto_to_json(info));
  EXPECT_EQ(session["prefix_digest"], "baaa885b00ff");
  const nlohmann::json json = nlohmann::json::parse(proto_to_json(trailer));
  EXPECT_EQ(json["stream_digest"], "0123456789abcdef");  // a hash, not a quantity
  EXPECT_EQ(json["encoded_bytes"], 130000);
}

TEST(ProtoJsonTest, NestedAndRepeatedMessagesAreRewrittenToo) {
  v1::ListSessionsResponse response;
  response.add_sessions()->set_kv_bytes(12);
  response.add_sessions()->set_kv_bytes(34);
  v1::EdgeHealthResponse health;
  health.mutable_model()->set_digest(std::string("\x01\x02", 2));
  health.mutable_cloud()->set_checked_unix_ms(99);
  const nlohmann::json list = nlohmann::json::parse(proto_to_json(response));
  EXPECT_EQ(list["sessions"][1]["kv_bytes"], 34);
  const nlohmann::json h = nlohmann::json::parse(proto_to_json(health));
  EXPECT_EQ(h["model"]["digest"], "0102");
  EXPECT_EQ(h["cloud"]["checked_unix_ms"], 99);
}

}  // namespace
}  // namespace baton
