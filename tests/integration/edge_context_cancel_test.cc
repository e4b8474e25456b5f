// Context limits and client cancellation against a real Edge server:
// - a prompt past the model's trained context is refused naming the trained
//   context (not the memory budget); prompt + max_tokens past it is clamped
//   with a warning before the first token;
// - a client that cancels mid-answer leaves the session holding the prompt
//   and the tokens generated so far (KV included; the next turn continues
//   from them); a cancel during prefill leaves it as it was;
// - ListSessions reports the KV bytes of the session's tokens, not of the
//   room a turn reserved.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/kv_stream/prefix_digest.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

// The session's row of ListSessions, polled until its turn is over.
v1::SessionInfo idle_session(v1::Edge::Stub& stub, const std::string& id) {
  v1::SessionInfo found;
  for (int attempt = 0; attempt < 500; ++attempt) {
    grpc::ClientContext context;
    live_call(context, 10);
    v1::ListSessionsResponse response;
    EXPECT_TRUE(stub.ListSessions(&context, v1::ListSessionsRequest(), &response).ok());
    for (const v1::SessionInfo& info : response.sessions()) {
      if (info.session_id() == id) found = info;
    }
    if (!found.session_id().empty() && !found.busy()) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "session " << id << " never became idle and listed";
  return found;
}

uint64_t f16_bytes_per_token(v1::Edge::Stub& stub) {
  const v1::EdgeHealthResponse h = health(stub);
  EXPECT_GE(h.memory().capacity_size(), 1);
  EXPECT_EQ(h.memory().capacity(0).codec().codec(), v1::KV_CODEC_F16);
  return h.memory().capacity(0).kv_bytes_per_token();
}

TEST(EdgeContextLimitTest, PromptPastTheTrainedContextIsRefusedNamingIt) {
  // 1 GiB: memory holds far more than the tiny shape's 2048 trained positions.
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  GenerateResult refused = generate(*edge->stub, greedy_request(prompt(2100, 1), "long", v1::SPLIT_POLICY_LOCAL));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.status.error_message();
  const std::string& message = refused.status.error_message();
  EXPECT_NE(message.find("session needs 2100 tokens; the model's trained context is 2048 tokens"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("memory is not the limit"), std::string::npos) << message;
  EXPECT_EQ(session_tokens(*edge->stub, "long"), -1);
}

TEST(EdgeContextLimitTest, MaxTokensPastTheContextIsClampedWithAWarningFirst) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  v1::GenerateRequest request = greedy_request(prompt(2040, 2), "edge", v1::SPLIT_POLICY_LOCAL, 50);
  grpc::ClientContext context;
  live_call(context, 60);
  auto reader = edge->stub->Generate(&context, request);
  v1::GenerateResponse response;
  std::string warning;
  bool text_before_warning = false;
  v1::Stats stats;
  while (reader->Read(&response)) {
    if (response.has_warning()) warning = response.warning();
    if (response.has_text() && warning.empty()) text_before_warning = true;
    if (response.has_stats()) stats = response.stats();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_FALSE(text_before_warning);
  EXPECT_NE(warning.find("2040 + 50 = 2090 tokens exceed the model's trained context of 2048 tokens: at most 8 "
                         "tokens will be generated"),
            std::string::npos)
      << warning;
  EXPECT_EQ(stats.context_warning(), warning);
  EXPECT_LE(stats.generated_tokens(), 8u);
  EXPECT_LE(stats.context_tokens(), 2048u);
  if (stats.finish_reason() != v1::FINISH_REASON_EOS) {
    EXPECT_EQ(stats.finish_reason(), v1::FINISH_REASON_CONTEXT_FULL);
    EXPECT_EQ(stats.generated_tokens(), 8u);
  }
}

TEST(EdgeCancelTest, CancelMidAnswerKeepsThePromptAndTheTokensGeneratedSoFar) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  const std::vector<uint32_t> turn1 = prompt(20, 20);
  constexpr uint32_t kMaxTokens = 1900;
  // The whole greedy answer, for reference.
  GenerateResult reference = generate(*edge->stub, greedy_request(turn1, "", v1::SPLIT_POLICY_LOCAL, kMaxTokens));
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();

  std::vector<uint32_t> seen;
  {
    grpc::ClientContext context;
    live_call(context, 60);
    auto reader = edge->stub->Generate(&context, greedy_request(turn1, "k", v1::SPLIT_POLICY_LOCAL, kMaxTokens));
    v1::GenerateResponse response;
    bool cancelled = false;
    while (reader->Read(&response)) {
      EXPECT_FALSE(response.has_stats()) << "the turn was not cancelled in time";
      if (!response.has_text() || cancelled) continue;
      for (uint32_t id : response.text().token_ids()) seen.push_back(id);
      if (seen.size() >= 5) {
        context.TryCancel();
        cancelled = true;
      }
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  ASSERT_GE(seen.size(), 5u);
  ASSERT_GE(reference.tokens.size(), seen.size());
  EXPECT_EQ(std::vector<uint32_t>(reference.tokens.begin(), reference.tokens.begin() + seen.size()), seen);

  // The session holds the prompt and at least the tokens the client saw, in
  // KV (the last sampled token at most waits for the next turn).
  const v1::SessionInfo info = idle_session(*edge->stub, "k");
  const int64_t kept = static_cast<int64_t>(info.token_count()) - static_cast<int64_t>(turn1.size());
  ASSERT_GE(kept + 1, static_cast<int64_t>(seen.size())) << info.token_count();
  EXPECT_LT(kept, static_cast<int64_t>(kMaxTokens));
  ASSERT_LE(kept, static_cast<int64_t>(reference.tokens.size()));
  std::vector<int32_t> expected(turn1.begin(), turn1.end());
  expected.insert(expected.end(), reference.tokens.begin(), reference.tokens.begin() + kept);
  const Digest256 digest = prefix_digest(expected);
  EXPECT_EQ(info.prefix_digest(), std::string(reinterpret_cast<const char*>(digest.data()), digest.size()))
      << "the session's tokens are not the prompt + the answer's first " << kept << " tokens";
  EXPECT_EQ(info.kv_bytes(), uint64_t{info.token_count()} * f16_bytes_per_token(*edge->stub));

  // The next turn continues from them.
  GenerateResult next = generate(*edge->stub, greedy_request(prompt(7, 21), "k", v1::SPLIT_POLICY_LOCAL, 4));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.stats.plan().reused_tokens(), info.token_count());
}

TEST(EdgeCancelTest, CancelBeforeTheFirstTokenLeavesTheSessionAsItWas) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  // A long prompt (local prefill in 256-token chunks), cancelled at its first
  // progress event. On a loaded machine the worker may reach the answer
  // before it sees the cancel: such an attempt decides nothing (and changes
  // its session), so each attempt has a session of its own.
  bool decided = false;
  for (int attempt = 0; attempt < 5 && !decided; ++attempt) {
    const std::string id = "p" + std::to_string(attempt);
    ASSERT_TRUE(generate(*edge->stub, greedy_request(prompt(20, 30), id, v1::SPLIT_POLICY_LOCAL)).status.ok());
    const v1::SessionInfo before = idle_session(*edge->stub, id);
    bool saw_text = false;
    {
      grpc::ClientContext context;
      live_call(context, 60);
      v1::GenerateRequest request = greedy_request(prompt(1900, 31), id, v1::SPLIT_POLICY_LOCAL, 100);
      request.set_progress(true);
      auto reader = edge->stub->Generate(&context, request);
      v1::GenerateResponse response;
      while (reader->Read(&response)) {
        saw_text = saw_text || response.has_text();
        if (response.has_progress()) context.TryCancel();
      }
      reader->Finish();
    }
    if (saw_text) continue;
    decided = true;
    const v1::SessionInfo after = idle_session(*edge->stub, id);
    EXPECT_EQ(after.token_count(), before.token_count());
    EXPECT_EQ(after.prefix_digest(), before.prefix_digest());
    EXPECT_EQ(after.kv_bytes(), before.kv_bytes());
  }
  EXPECT_TRUE(decided) << "every attempt reached the answer before the cancel";
}

TEST(EdgeSessionBytesTest, ListSessionsReportsTheKvOfTheSessionsTokens) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  // 11 prompt tokens and max_tokens 4: the turn reserves KV for 15 tokens,
  // and the session then holds 14 (the 4th sampled token enters the KV on
  // the next turn) or fewer (an end-of-sequence token).
  GenerateResult turn = generate(*edge->stub, greedy_request(prompt(11, 40), "b", v1::SPLIT_POLICY_LOCAL, 4));
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  const v1::SessionInfo info = idle_session(*edge->stub, "b");
  EXPECT_GT(info.token_count(), 0u);
  EXPECT_EQ(info.kv_bytes(), uint64_t{info.token_count()} * f16_bytes_per_token(*edge->stub))
      << info.token_count() << " tokens";
  // Health's KV in use is the same figure.
  EXPECT_EQ(health(*edge->stub).memory().kv_used_bytes(), info.kv_bytes());
}

}  // namespace
}  // namespace baton::edge_test
