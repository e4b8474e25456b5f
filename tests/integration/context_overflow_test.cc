// Conversations that outgrow the context limit (edge_decode/generate/
// context_overflow.h), on a real edge (and cloud) on loopback with the tiny
// model and an F16 store:
//   - under a KV budget of about four turns, a 60-turn conversation from a
//     pack never fails: old turns are dropped, the pack never is, the Stats
//     and the plan say what went, and the session file records the turns it
//     holds; a restarted edge goes on from the truncated session;
//   - the KV after a truncation equals, bit for bit, a fresh prefill of the
//     kept tokens;
//   - a truncated tail prefilled by the cloud decodes the same tokens as one
//     prefilled here;
//   - shift moves the kept turns' cells (no prefill of them);
//   - a truncating turn cancelled before its answer leaves the session as
//     it was;
//   - refuse (per request, or the agent's --context-overflow) keeps the old
//     behaviour; a prompt that does not fit even with every earlier turn
//     dropped is refused and the session is unchanged.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "edge_decode/plan/memory_plan.h"
#include "edge_decode/store/session_file.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

using ::testing::HasSubstr;

constexpr int kBudgetTokens = 180;  // KV budget, f16 tokens: about four turns of 20 + 12

// The served model's fingerprint and geometry, to read the edge's session files.
struct Served {
  std::unique_ptr<Model> model;
  ModelFingerprint fingerprint;
  KvGeometry geometry;
};

Served served() {
  Served s;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(edge_model_path("tiny"));
  EXPECT_TRUE(model.ok()) << model.status();
  s.model = std::move(*model);
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(*s.model);
  EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
  s.fingerprint = *fingerprint;
  s.geometry = kv_geometry_for(s.model->spec());
  return s;
}

// A --memory-budget that leaves KV room for exactly `tokens` F16 tokens.
uint64_t budget_for(const Served& s, int tokens) {
  const KvCodecConfig f16 = default_kv_codec_config(KvCodecConfig::Bits::kF16, s.geometry);
  const uint64_t per_token = static_cast<uint64_t>(QuantizedKvCache::bytes_per_token(f16, s.geometry));
  return s.model->weight_bytes() + engine_scratch_bytes(s.model->spec()) + kMinHeadroomBytes + tokens * per_token;
}

// Puts the F16 KV of `tokens` on the cloud as pack `id` (PutPrefix).
void put_pack(Cloud& cloud, const std::vector<uint32_t>& tokens, const std::string& id) {
  v1::PrefillRequest request;
  for (uint32_t token : tokens) request.mutable_tokens()->add_ids(token);
  request.mutable_codec()->set_codec(v1::KV_CODEC_F16);
  std::vector<v1::KvStreamMessage> pack;
  {
    grpc::ClientContext context;
    live_call(context, 30);
    auto reader = cloud.stub->Prefill(&context, request);
    v1::KvStreamMessage message;
    while (reader->Read(&message)) pack.push_back(message);
    const grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_FALSE(pack.empty());
  pack.front().mutable_header()->set_pack_id(id);
  grpc::ClientContext context;
  live_call(context, 30);
  v1::PutPrefixResponse put;
  auto writer = cloud.stub->PutPrefix(&context, &put);
  for (const v1::KvStreamMessage& m : pack) ASSERT_TRUE(writer->Write(m));
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
}

void pull_pack(Edge& edge, const std::string& id) {
  grpc::ClientContext context;
  live_call(context, 30);
  v1::PullPackRequest request;
  request.set_pack_id(id);
  auto reader = edge.stub->PullPack(&context, request);
  v1::PullPackResponse response;
  bool done = false;
  while (reader->Read(&response)) done = done || response.has_done();
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(done);
}

// The session `id` as the edge saved it under `dir`.
std::unique_ptr<Session> saved_session(const Served& s, const std::string& dir, const std::string& id) {
  absl::StatusOr<std::unique_ptr<Session>> loaded =
      load_session_file(dir + "/" + id + std::string(kSessionFileSuffix), s.fingerprint, s.geometry);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? std::move(*loaded) : nullptr;
}

// Every stored byte of positions [0, n) of two stores.
void expect_same_kv(const QuantizedKvCache& a, const QuantizedKvCache& b, int64_t n) {
  ASSERT_GE(a.size(), n);
  ASSERT_GE(b.size(), n);
  for (int layer = 0; layer < a.geometry().n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      absl::StatusOr<QuantizedKvBlock> x = a.export_block(layer, is_key, 0, n);
      absl::StatusOr<QuantizedKvBlock> y = b.export_block(layer, is_key, 0, n);
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_EQ(x->codes, y->codes) << "layer " << layer << (is_key ? " K" : " V");
    }
  }
}

v1::GenerateRequest turn(int prompt_tokens, int salt, const std::string& session, uint32_t max_tokens = 12,
                         v1::SplitPolicy policy = v1::SPLIT_POLICY_LOCAL) {
  return greedy_request(prompt(prompt_tokens, salt), session, policy, max_tokens);
}

class ContextOverflowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    served_ = served();
    sessions_dir_ = testing::make_temp_dir("overflow-sessions");
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(sessions_dir_, ignored);
  }

  // An edge whose KV budget holds kBudgetTokens f16 tokens.
  EdgeServiceOptions small_edge_options(const std::string& cloud_address = "") const {
    EdgeServiceOptions options = edge_options(cloud_address);
    options.memory_budget_bytes = budget_for(served_, kBudgetTokens);
    options.sessions_dir = sessions_dir_;
    return options;
  }
  std::unique_ptr<Edge> small_edge(const EdgeServiceOptions& options) {
    std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), options);
    EXPECT_NE(edge->stub, nullptr);
    if (edge->stub != nullptr) {
      const v1::EdgeHealthResponse h = health(*edge->stub);
      EXPECT_EQ(h.memory().capacity(0).max_context_tokens(), static_cast<uint32_t>(kBudgetTokens));
    }
    return edge;
  }

  Served served_;
  std::string sessions_dir_;
};

TEST_F(ContextOverflowTest, SixtyTurnsUnderABudgetOfFourTurnsNeverFailAndThePackIsNeverDropped) {
  std::unique_ptr<Cloud> cloud = start_cloud(edge_model_path("tiny"));
  ASSERT_NE(cloud->stub, nullptr);
  const std::vector<uint32_t> system = prompt(24, 77);
  ASSERT_NO_FATAL_FAILURE(put_pack(*cloud, system, "sys"));
  EdgeServiceOptions options = small_edge_options(cloud->address());
  options.packs_dir = testing::make_temp_dir("overflow-packs");
  std::unique_ptr<Edge> edge = small_edge(options);
  ASSERT_NE(edge->stub, nullptr);
  ASSERT_NO_FATAL_FAILURE(pull_pack(*edge, "sys"));

  uint32_t truncating_turns = 0;
  uint32_t dropped_turns = 0;
  uint64_t dropped_tokens = 0;
  for (int i = 1; i <= 60; ++i) {
    v1::GenerateRequest request = turn(20, i, "long");
    if (i == 1) request.set_pack_id("sys");
    const GenerateResult result = generate(*edge->stub, request);
    ASSERT_TRUE(result.status.ok()) << "turn " << i << ": " << result.status.error_message();
    ASSERT_TRUE(result.has_stats);
    EXPECT_LE(result.stats.context_tokens(), static_cast<uint32_t>(kBudgetTokens)) << "turn " << i;
    // The pack's KV is always held (reused), never recomputed nor dropped.
    EXPECT_GE(result.stats.plan().reused_tokens(), 24u) << "turn " << i;
    if (!result.stats.context_overflow().empty()) {
      ++truncating_turns;
      dropped_turns += result.stats.dropped_turns();
      dropped_tokens += result.stats.dropped_tokens();
      EXPECT_THAT(result.stats.context_overflow(), HasSubstr("kept the pack (24 tokens)"));
      EXPECT_THAT(result.stats.plan().reason(), HasSubstr(result.stats.context_overflow()));
      EXPECT_EQ(result.stats.plan().reused_tokens(), 24u) << "turn " << i;
      EXPECT_GT(result.stats.dropped_turns(), 0u);
    }
  }
  EXPECT_GE(truncating_turns, 10u);
  EXPECT_GE(dropped_turns, 50u);

  // The session file: the pack first, the turns it holds, what was dropped.
  std::unique_ptr<Session> saved = saved_session(served_, sessions_dir_, "long");
  ASSERT_NE(saved, nullptr);
  ASSERT_GE(saved->tokens.size(), system.size());
  const std::vector<int32_t> pack_tokens(system.begin(), system.end());
  EXPECT_TRUE(std::equal(pack_tokens.begin(), pack_tokens.end(), saved->tokens.begin()));
  EXPECT_EQ(saved->pack_tokens, 24u);
  EXPECT_EQ(saved->turn_count, 60u);
  EXPECT_EQ(saved->dropped_turns, dropped_turns);
  EXPECT_EQ(saved->dropped_tokens, dropped_tokens);
  EXPECT_EQ(saved->truncations, truncating_turns);
  ASSERT_FALSE(saved->turns.empty());
  EXPECT_EQ(saved->turns.back().number, 60u);
  EXPECT_EQ(saved->turns.size() + saved->dropped_turns, 60u);
  EXPECT_GE(saved->turns.front().first_token, 24u);
  const int64_t held_kv = saved->kv->size();
  const v1::SessionInfo listed = session_info(*edge->stub, "long");
  EXPECT_EQ(listed.turn_count(), 60u);
  EXPECT_EQ(listed.first_held_turn(), saved->turns.front().number);
  EXPECT_EQ(listed.dropped_turns(), dropped_turns);
  EXPECT_EQ(listed.dropped_tokens(), dropped_tokens);

  // A restarted edge goes on from the truncated session.
  edge->stop();
  edge.reset();
  std::unique_ptr<Edge> again = small_edge(options);
  ASSERT_NE(again->stub, nullptr);
  const GenerateResult next = generate(*again->stub, turn(20, 61, "long"));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  if (next.stats.context_overflow().empty()) {
    EXPECT_EQ(static_cast<int64_t>(next.stats.plan().reused_tokens()), held_kv);
  } else {
    EXPECT_EQ(next.stats.plan().reused_tokens(), 24u);
  }
  std::unique_ptr<Session> after = saved_session(served_, sessions_dir_, "long");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->turn_count, 61u);
  EXPECT_EQ(after->turns.back().number, 61u);
  EXPECT_EQ(session_info(*again->stub, "long").turn_count(), 61u);
}

TEST_F(ContextOverflowTest, TheKvAfterATruncationEqualsAFreshPrefillOfTheKeptTokensBitForBit) {
  std::unique_ptr<Edge> edge = small_edge(small_edge_options());
  ASSERT_NE(edge->stub, nullptr);
  for (int i = 1; i <= 3; ++i) {
    v1::GenerateRequest request = turn(30, i, "t");
    request.set_keep_tokens(8);  // a "system prompt" at the start of turn 1
    const GenerateResult result = generate(*edge->stub, request);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    EXPECT_TRUE(result.stats.context_overflow().empty()) << "turn " << i << " " << result.stats.context_overflow();
  }
  std::unique_ptr<Session> before = saved_session(served_, sessions_dir_, "t");
  ASSERT_NE(before, nullptr);
  // Turn 4 does not fit next to the three (at least 90 + 100 tokens): one
  // token of answer, so the KV afterwards is the truncated prefill's (plus
  // the last prompt token's decode step, as in any prefill).
  v1::GenerateRequest fourth = turn(100, 4, "t", /*max_tokens=*/1);
  fourth.set_keep_tokens(8);
  const GenerateResult truncated = generate(*edge->stub, fourth);
  ASSERT_TRUE(truncated.status.ok()) << truncated.status.error_message();
  ASSERT_FALSE(truncated.stats.context_overflow().empty());
  EXPECT_THAT(truncated.stats.context_overflow(), HasSubstr("kept the first 8 tokens"));
  EXPECT_EQ(truncated.stats.plan().reused_tokens(), 8u);
  std::unique_ptr<Session> after = saved_session(served_, sessions_dir_, "t");
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(std::equal(before->tokens.begin(), before->tokens.begin() + 8, after->tokens.begin()));
  const int64_t n = after->kv->size();
  // The answer's one token (unless it was end-of-sequence) enters the KV next turn.
  const bool answered = truncated.stats.finish_reason() != v1::FINISH_REASON_EOS;
  ASSERT_EQ(n + (answered ? 1 : 0), static_cast<int64_t>(after->tokens.size()));
  EXPECT_EQ(static_cast<uint32_t>(n), truncated.stats.context_tokens());

  // A new session whose prompt is the kept tokens.
  const std::vector<uint32_t> kept(after->tokens.begin(), after->tokens.begin() + n);
  const GenerateResult fresh = generate(*edge->stub, greedy_request(kept, "fresh", v1::SPLIT_POLICY_LOCAL, 1));
  ASSERT_TRUE(fresh.status.ok()) << fresh.status.error_message();
  std::unique_ptr<Session> reference = saved_session(served_, sessions_dir_, "fresh");
  ASSERT_NE(reference, nullptr);
  ASSERT_EQ(reference->kv->size(), n);
  expect_same_kv(*after->kv, *reference->kv, n);
  EXPECT_EQ(after->tokens, reference->tokens) << "the same conversation and the same next token";
}

TEST_F(ContextOverflowTest, RefuseKeepsTheRefusalWithTheNumbersAndTheSessionUnchanged) {
  // Per request, on an agent that truncates.
  std::unique_ptr<Edge> edge = small_edge(small_edge_options());
  ASSERT_NE(edge->stub, nullptr);
  ASSERT_TRUE(generate(*edge->stub, turn(100, 1, "r")).status.ok());
  const int64_t held = session_tokens(*edge->stub, "r");
  v1::GenerateRequest second = turn(100, 2, "r");
  second.set_context_overflow(v1::CONTEXT_OVERFLOW_REFUSE);
  const GenerateResult refused = generate(*edge->stub, second);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("this device fits 180 with codec f16"));
  EXPECT_EQ(session_tokens(*edge->stub, "r"), held);
  // The same turn truncates by default.
  const GenerateResult truncated = generate(*edge->stub, turn(100, 2, "r"));
  ASSERT_TRUE(truncated.status.ok()) << truncated.status.error_message();
  EXPECT_THAT(truncated.stats.context_overflow(), HasSubstr("dropped turn 1"));
  edge->stop();

  // The agent's --context-overflow refuse, the request unset.
  EdgeServiceOptions options = small_edge_options();
  options.context_overflow = ContextOverflowMode::kRefuse;
  std::unique_ptr<Edge> refusing = small_edge(options);
  ASSERT_NE(refusing->stub, nullptr);
  ASSERT_TRUE(generate(*refusing->stub, turn(100, 1, "r2")).status.ok());
  const GenerateResult agent_refused = generate(*refusing->stub, turn(100, 2, "r2"));
  EXPECT_EQ(agent_refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(agent_refused.status.error_message(), HasSubstr("session needs"));
}

TEST_F(ContextOverflowTest, APromptThatDoesNotFitEvenWithEveryTurnDroppedIsRefusedAndTheSessionKept) {
  std::unique_ptr<Edge> edge = small_edge(small_edge_options());
  ASSERT_NE(edge->stub, nullptr);
  ASSERT_TRUE(generate(*edge->stub, turn(60, 1, "big")).status.ok());
  const int64_t held = session_tokens(*edge->stub, "big");
  std::unique_ptr<Session> before = saved_session(served_, sessions_dir_, "big");
  ASSERT_NE(before, nullptr);
  const GenerateResult refused = generate(*edge->stub, turn(200, 2, "big"));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("even with every earlier turn dropped"));
  EXPECT_EQ(session_tokens(*edge->stub, "big"), held);
  // The next turn that fits continues the untouched session.
  const GenerateResult next = generate(*edge->stub, turn(10, 3, "big"));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(next.stats.plan().reused_tokens()), held);
  std::unique_ptr<Session> after = saved_session(served_, sessions_dir_, "big");
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(std::equal(before->tokens.begin(), before->tokens.end(), after->tokens.begin()));
}

TEST_F(ContextOverflowTest, ShiftMovesTheKeptCellsInsteadOfPrefillingThemAgain) {
  std::unique_ptr<Edge> edge = small_edge(small_edge_options());
  ASSERT_NE(edge->stub, nullptr);
  uint32_t shifted_turns = 0;
  for (int i = 1; i <= 20; ++i) {
    v1::GenerateRequest request = turn(20, i, "shifting");
    request.set_context_overflow(v1::CONTEXT_OVERFLOW_SHIFT);
    const GenerateResult result = generate(*edge->stub, request);
    ASSERT_TRUE(result.status.ok()) << "turn " << i << ": " << result.status.error_message();
    EXPECT_LE(result.stats.context_tokens(), static_cast<uint32_t>(kBudgetTokens));
    if (result.stats.context_overflow().empty()) continue;
    ++shifted_turns;
    EXPECT_THAT(result.stats.context_overflow(), HasSubstr("(no recompute)"));
    // The kept turns' cells are held (reused), only the new prompt is prefilled.
    EXPECT_GE(result.stats.plan().reused_tokens(), 19u) << result.stats.plan().reason();
    EXPECT_LE(result.stats.plan().prefill_tokens(), 21u) << result.stats.plan().reason();
  }
  EXPECT_GE(shifted_turns, 5u);
  std::unique_ptr<Session> saved = saved_session(served_, sessions_dir_, "shifting");
  ASSERT_NE(saved, nullptr);
  EXPECT_EQ(saved->turn_count, 20u);
  EXPECT_EQ(saved->truncations, shifted_turns);
}

// A truncating turn cancelled while it prefills the kept tail leaves the
// session exactly as it was (the old conversation was only set aside).
TEST(ContextOverflowCancelTest, ATruncatingTurnCancelledBeforeItsAnswerLeavesTheSessionAsItWas) {
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(""));
  ASSERT_NE(edge->stub, nullptr);
  // Past the trained context of 2048 the second turn drops the first; the
  // prompt's local prefill (256-token chunks) is cancelled at its first
  // progress event. An attempt whose answer began first decides nothing.
  bool decided = false;
  for (int attempt = 0; attempt < 5 && !decided; ++attempt) {
    const std::string id = "c" + std::to_string(attempt);
    ASSERT_TRUE(generate(*edge->stub, turn(1500, 40 + attempt, id)).status.ok());
    v1::SessionInfo before;
    for (int poll = 0; poll < 500 && (before.session_id().empty() || before.busy()); ++poll) {
      before = session_info(*edge->stub, id);
    }
    ASSERT_FALSE(before.busy());
    bool saw_text = false;
    {
      grpc::ClientContext context;
      live_call(context, 60);
      v1::GenerateRequest request = turn(1000, 50 + attempt, id, 100);
      request.set_progress(true);
      auto reader = edge->stub->Generate(&context, request);
      v1::GenerateResponse response;
      while (reader->Read(&response)) {
        saw_text = saw_text || response.has_text();
        if (response.has_progress() && response.progress().phase() == v1::PHASE_LOCAL_PREFILL) context.TryCancel();
      }
      reader->Finish();
    }
    if (saw_text) continue;
    v1::SessionInfo after;
    for (int poll = 0; poll < 500 && (after.session_id().empty() || after.busy()); ++poll) {
      after = session_info(*edge->stub, id);
    }
    // The client stops reading at the first progress event, so it may not see
    // an answer the edge began before it noticed the cancel (a fast host); a
    // turn interrupted so keeps its tokens (keep_interrupted_turn). A kept turn
    // that holds more than the kept tail and the prompt began its answer: it
    // decides nothing either (a turn of the prompt alone would still fail below).
    const uint64_t dropped_now = after.dropped_tokens() - before.dropped_tokens();
    if (after.turn_count() == before.turn_count() + 1 &&
        after.token_count() > before.token_count() - dropped_now + 1000) {
      continue;
    }
    decided = true;
    EXPECT_EQ(after.token_count(), before.token_count());
    EXPECT_EQ(after.prefix_digest(), before.prefix_digest());
    EXPECT_EQ(after.turn_count(), 1u);
    EXPECT_EQ(after.dropped_turns(), 0u);
    // The next turn that fits continues the untouched conversation.
    const GenerateResult next = generate(*edge->stub, turn(10, 60, id));
    ASSERT_TRUE(next.status.ok()) << next.status.error_message();
    EXPECT_TRUE(next.stats.context_overflow().empty()) << next.stats.context_overflow();
    EXPECT_EQ(next.stats.plan().reused_tokens(), before.token_count());
  }
  EXPECT_TRUE(decided) << "every attempt reached the answer before the cancel";
}

// Past the trained context (2048 tokens; the KV budget is not the limit), the
// kept tail of a truncated turn is prefilled by the cloud under policy cloud,
// and the conversation decodes the same tokens as one prefilled here (F16:
// local and cloud prefill give the same KV).
TEST(ContextOverflowCloudTest, ATruncatedTailPrefilledByTheCloudDecodesAsALocalOne) {
  std::unique_ptr<Cloud> cloud = start_cloud(edge_model_path("tiny"));
  ASSERT_NE(cloud->stub, nullptr);
  std::unique_ptr<Edge> edge = start_edge(edge_model_path("tiny"), edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  bool truncated = false;
  for (int i = 1; i <= 5 && !truncated; ++i) {
    const GenerateResult local = generate(*edge->stub, turn(480, i, "here", 8, v1::SPLIT_POLICY_LOCAL));
    const GenerateResult remote = generate(*edge->stub, turn(480, i, "there", 8, v1::SPLIT_POLICY_CLOUD));
    ASSERT_TRUE(local.status.ok()) << local.status.error_message();
    ASSERT_TRUE(remote.status.ok()) << remote.status.error_message();
    EXPECT_EQ(remote.stats.plan().place(), v1::PREFILL_PLACE_CLOUD);
    EXPECT_EQ(local.stats.context_overflow().empty(), remote.stats.context_overflow().empty()) << "turn " << i;
    EXPECT_EQ(local.tokens, remote.tokens) << "turn " << i;
    truncated = !remote.stats.context_overflow().empty();
    if (truncated) {
      EXPECT_THAT(remote.stats.context_overflow(), HasSubstr("dropped turn"));
      EXPECT_GT(remote.stats.plan().cloud_tokens(), 480u) << "the kept tail went to the cloud too";
    }
  }
  EXPECT_TRUE(truncated) << "five turns of 488 tokens never passed the trained context of 2048";
}

}  // namespace
}  // namespace baton::edge_test
