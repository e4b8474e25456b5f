// The cloud's caches must not answer questions about other users' data
// (issue 15, item 3): the session cache reports and reuses an entry only for
// its owner (a request that extends the stored history), refuses guessable
// session ids, and cache_salt partitions the prefix cache. Real
// PrefillServers on 127.0.0.1:0 serving the synthetic tiny model.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "common/kv_stream/prefix_digest.h"
#include "proto/baton.grpc.pb.h"
#include "tests/support/edge_test_env.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

// A secret-looking id of 64 hex characters (what baton-edge sends).
constexpr char kVictimSession[] = "5f1c0a9e3b7d4c2a8e6f0b1d3c5a7e9f5f1c0a9e3b7d4c2a8e6f0b1d3c5a7e9f";

std::unique_ptr<edge_test::Cloud> start(uint64_t prefix_cache_bytes) {
  PrefillServiceOptions options;
  options.threads = 1;
  options.max_context_tokens = 512;
  options.prefix_cache_bytes = prefix_cache_bytes;
  return edge_test::start_cloud_with(testing::synth_model_path("tiny", GgmlType::kF32), options);
}

// Token ids below 250 (inside the tiny model's vocabulary).
std::vector<uint32_t> text(int n, int seed) {
  std::vector<uint32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<uint32_t>((i * 7 + seed * 131 + 3) % 250));
  return tokens;
}

struct Answer {
  grpc::Status status;
  std::vector<v1::KvStreamMessage> messages;
  uint32_t cached_tokens() const {
    return messages.empty() || !messages.back().has_trailer() ? 0 : messages.back().trailer().producer().cached_tokens();
  }
  uint32_t computed_tokens() const {
    return messages.empty() || !messages.back().has_trailer() ? 0
                                                              : messages.back().trailer().producer().computed_tokens();
  }
};

Answer prefill(v1::Prefill::Stub& stub, const std::vector<uint32_t>& tokens, const std::string& session_id,
               const std::string& cache_salt = "") {
  v1::PrefillRequest request;
  for (uint32_t id : tokens) request.mutable_tokens()->add_ids(id);
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  request.set_session_id(session_id);
  request.set_cache_salt(cache_salt);
  Answer answer;
  grpc::ClientContext context;
  edge_test::live_call(context, 60);
  auto reader = stub.Prefill(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) answer.messages.push_back(message);
  answer.status = reader->Finish();
  return answer;
}

// The repro of the issue: the victim's history is 20 tokens; a guesser who
// knows the session id tries a right and a wrong continuation of a 7-token
// known start. Before the fix the right guess reported 9 cached tokens and
// the wrong one 7, and each probe replaced the victim's entry.
TEST(PrefillSessionPrivacyTest, GuessesOfAnotherUsersTextAreIndistinguishableAndLeaveTheEntryAlone) {
  auto cloud = start(/*prefix_cache_bytes=*/0);  // only the session cache could answer
  ASSERT_NE(cloud->stub, nullptr);
  const std::vector<uint32_t> history = text(20, 1);
  Answer stored = prefill(*cloud->stub, history, kVictimSession);
  ASSERT_TRUE(stored.status.ok()) << stored.status.error_message();

  std::vector<uint32_t> right_guess(history.begin(), history.begin() + 9);
  right_guess.push_back(400);
  std::vector<uint32_t> wrong_guess(history.begin(), history.begin() + 7);
  wrong_guess.push_back(401);
  wrong_guess.push_back(402);
  wrong_guess.push_back(403);
  Answer right = prefill(*cloud->stub, right_guess, kVictimSession);
  Answer wrong = prefill(*cloud->stub, wrong_guess, kVictimSession);
  ASSERT_TRUE(right.status.ok()) << right.status.error_message();
  ASSERT_TRUE(wrong.status.ok()) << wrong.status.error_message();
  EXPECT_EQ(right.cached_tokens(), 0u);
  EXPECT_EQ(wrong.cached_tokens(), 0u);
  EXPECT_EQ(right.computed_tokens(), right_guess.size());
  EXPECT_EQ(wrong.computed_tokens(), wrong_guess.size());
  // A prefix of the stored history is no proof of ownership either.
  Answer prefix = prefill(*cloud->stub, std::vector<uint32_t>(history.begin(), history.begin() + 12), kVictimSession);
  ASSERT_TRUE(prefix.status.ok());
  EXPECT_EQ(prefix.cached_tokens(), 0u);

  // The owner's next turn still finds the whole history: no probe replaced it.
  std::vector<uint32_t> next_turn = history;
  for (uint32_t id : text(6, 2)) next_turn.push_back(id);
  Answer owner = prefill(*cloud->stub, next_turn, kVictimSession);
  ASSERT_TRUE(owner.status.ok()) << owner.status.error_message();
  EXPECT_EQ(owner.cached_tokens(), history.size());
  EXPECT_EQ(owner.computed_tokens(), 6u);
}

TEST(PrefillSessionPrivacyTest, GuessableSessionIdsAreRefused) {
  auto cloud = start(0);
  ASSERT_NE(cloud->stub, nullptr);
  Answer refused = prefill(*cloud->stub, text(10, 3), "chat-1");
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find(">= 128 bits"), std::string::npos) << refused.status.error_message();
  Answer accepted = prefill(*cloud->stub, text(10, 3), std::string(32, 'k'));
  EXPECT_TRUE(accepted.status.ok()) << accepted.status.error_message();
}

TEST(PrefillCacheSaltTest, DifferentSaltsNeverShareBlocksAndTheSameSaltDoes) {
  auto cloud = start(uint64_t{1} << 30);
  ASSERT_NE(cloud->stub, nullptr);
  const std::vector<uint32_t> prompt = text(130, 4);  // two full 64-token blocks
  Answer first = prefill(*cloud->stub, prompt, "", "salt-a");
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.cached_tokens(), 0u);

  Answer other_salt = prefill(*cloud->stub, prompt, "", "salt-b");
  ASSERT_TRUE(other_salt.status.ok());
  EXPECT_EQ(other_salt.cached_tokens(), 0u);
  EXPECT_EQ(other_salt.computed_tokens(), 130u);
  Answer no_salt = prefill(*cloud->stub, prompt, "");
  ASSERT_TRUE(no_salt.status.ok());
  EXPECT_EQ(no_salt.cached_tokens(), 0u);
  EXPECT_EQ(no_salt.computed_tokens(), 130u);
  Answer same_salt = prefill(*cloud->stub, prompt, "", "salt-a");
  ASSERT_TRUE(same_salt.status.ok());
  EXPECT_EQ(same_salt.cached_tokens(), 128u);
  EXPECT_EQ(same_salt.computed_tokens(), 2u);

  // The salt changes the cache keys only: the header's digest is the plain one.
  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  const Digest256 plain = prefix_digest(ids);
  for (const Answer* answer : {&first, &other_salt, &no_salt, &same_salt}) {
    ASSERT_TRUE(answer->messages.front().has_header());
    EXPECT_EQ(answer->messages.front().header().prefix_digest(), std::string(plain.begin(), plain.end()));
  }
}

TEST(PrefillCacheSaltTest, SaltsOver256BytesAreRefused) {
  auto cloud = start(uint64_t{1} << 30);
  ASSERT_NE(cloud->stub, nullptr);
  Answer refused = prefill(*cloud->stub, text(10, 5), "", std::string(257, 's'));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("257"), std::string::npos) << refused.status.error_message();
  EXPECT_TRUE(prefill(*cloud->stub, text(10, 5), "", std::string(256, 's')).status.ok());
}

}  // namespace
}  // namespace baton
