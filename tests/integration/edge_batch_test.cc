// Several sessions generating at once on one edge agent (--max-batch), against
// a real EdgeServer on loopback with the bundled model (Q4_0):
// - four concurrent greedy turns on four sessions give exactly the tokens and
//   text of the same turns run one at a time (an agent with --max-batch 1),
//   first turns and follow-ups, and their decode steps were shared
//   (Stats.decode_batch_max > 1);
// - a turn cancelled during its (chunked) prefill while three others decode
//   leaves those three identical and its own session exactly as before;
// - a turn whose client leaves mid-answer while three others decode leaves
//   those three identical, and its session keeps what it was sent (the
//   agent's contract for a client that leaves after its first token);
// - two turns of one session sent at once run one after the other (the
//   second continues the first), as with one turn at a time.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/model/model_quantize.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

// The bundled model as the edge holds it (Q4_0), quantized once per run.
const std::string& kjv_q4_0_path() {
  static const std::string path = [] {
    const std::string out = testing::make_temp_dir("edge-batch") + "/kjv-q4_0.gguf";
    QuantizeOptions options;
    options.type = GgmlType::kQ4_0;
    options.n_threads = 1;
    const absl::Status status =
        quantize_model(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf", out, options);
    if (!status.ok()) {
      ADD_FAILURE() << status;
      std::abort();
    }
    return out;
  }();
  return path;
}

// Plain decode steps (no speculative drafts), which the batcher shares
// between turns; speculative turns run their passes one at a time between
// them (DecodeBatcher::Seat::exclusive).
EdgeServiceOptions batch_options(int max_batch, uint32_t speculative = 0) {
  EdgeServiceOptions options = edge_options("");
  options.threads = 2;
  options.max_batch = max_batch;
  options.speculative = speculative;
  return options;
}

constexpr int kSessions = 4;

v1::GenerateRequest turn_request(int session, int turn, int prompt_tokens, uint32_t max_tokens) {
  return greedy_request(prompt(prompt_tokens, 10 * session + turn + 1), "s" + std::to_string(session),
                        v1::SPLIT_POLICY_LOCAL, max_tokens);
}

// Runs `requests` at once, one client thread each, released together.
std::vector<GenerateResult> run_together(v1::Edge::Stub& stub, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<GenerateResult> results(requests.size());
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < static_cast<int>(requests.size())) std::this_thread::yield();
      results[i] = generate(stub, requests[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void expect_same_turn(const GenerateResult& alone, const GenerateResult& together, const std::string& what) {
  ASSERT_TRUE(alone.status.ok()) << what << ": " << alone.status.error_message();
  ASSERT_TRUE(together.status.ok()) << what << ": " << together.status.error_message();
  EXPECT_FALSE(alone.tokens.empty()) << what;
  EXPECT_EQ(together.tokens, alone.tokens) << what;
  EXPECT_EQ(together.text, alone.text) << what;
  EXPECT_EQ(together.stats.finish_reason(), alone.stats.finish_reason()) << what;
  EXPECT_EQ(together.stats.context_tokens(), alone.stats.context_tokens()) << what;
}

TEST(EdgeBatchTest, ConcurrentGreedyTurnsGiveTheTokensOfTheSameTurnsOneAtATimeAndShareSteps) {
  std::unique_ptr<Edge> one = start_edge(kjv_q4_0_path(), batch_options(1));
  std::unique_ptr<Edge> batched = start_edge(kjv_q4_0_path(), batch_options(4));
  uint32_t most_shared = 0;
  // A first turn and a follow-up on each session; prompts of different
  // lengths, so the sessions decode at different positions.
  for (int turn = 0; turn < 2; ++turn) {
    std::vector<v1::GenerateRequest> requests;
    for (int s = 0; s < kSessions; ++s) requests.push_back(turn_request(s, turn, 20 + 13 * s, 48));
    std::vector<GenerateResult> alone;
    for (const v1::GenerateRequest& r : requests) alone.push_back(generate(*one->stub, r));
    const std::vector<GenerateResult> together = run_together(*batched->stub, requests);
    for (int s = 0; s < kSessions; ++s) {
      const std::string what = "session " + std::to_string(s) + " turn " + std::to_string(turn);
      expect_same_turn(alone[s], together[s], what);
      EXPECT_EQ(alone[s].stats.decode_batch_max(), 1u) << what << ": --max-batch 1 shared a step";
      most_shared = std::max(most_shared, together[s].stats.decode_batch_max());
      const v1::SessionInfo a = session_info(*one->stub, "s" + std::to_string(s));
      const v1::SessionInfo b = session_info(*batched->stub, "s" + std::to_string(s));
      EXPECT_EQ(b.token_count(), a.token_count()) << what;
      EXPECT_EQ(b.prefix_digest(), a.prefix_digest()) << what;
    }
  }
  EXPECT_GT(most_shared, 1u) << "four concurrent turns never shared a decode step";
}

TEST(EdgeBatchTest, ATurnCancelledDuringItsPrefillLeavesTheOthersIdenticalAndItsSessionAsBefore) {
  std::unique_ptr<Edge> one = start_edge(kjv_q4_0_path(), batch_options(1));
  std::unique_ptr<Edge> batched = start_edge(kjv_q4_0_path(), batch_options(4));
  // First turns, one at a time on both agents.
  for (int s = 0; s < kSessions; ++s) {
    const v1::GenerateRequest first = turn_request(s, 0, 24, 16);
    ASSERT_TRUE(generate(*one->stub, first).status.ok());
    ASSERT_TRUE(generate(*batched->stub, first).status.ok());
  }
  const v1::SessionInfo before = session_info(*batched->stub, "s3");
  ASSERT_FALSE(before.session_id().empty());

  // Follow-ups: sessions 0-2 decode 64 tokens while session 3 prefills a
  // long prompt (chunk by chunk between their steps) and is cancelled when
  // its first progress report shows the prefill under way.
  std::vector<v1::GenerateRequest> requests;
  for (int s = 0; s < 3; ++s) requests.push_back(turn_request(s, 1, 12 + 5 * s, 64));
  std::vector<GenerateResult> alone;
  for (const v1::GenerateRequest& r : requests) alone.push_back(generate(*one->stub, r));

  v1::GenerateRequest long_turn = turn_request(3, 1, 900, 16);
  long_turn.set_progress(true);
  std::atomic<bool> cancelled_in_prefill{false};
  std::vector<uint32_t> long_tokens;
  grpc::Status long_status;
  std::thread canceller([&] {
    grpc::ClientContext context;
    live_call(context, 60);
    auto reader = batched->stub->Generate(&context, long_turn);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_text()) {
        for (uint32_t id : response.text().token_ids()) long_tokens.push_back(id);
      }
      if (response.has_progress() && response.progress().phase() == v1::PHASE_LOCAL_PREFILL &&
          response.progress().tokens_done() < response.progress().tokens_total() && !cancelled_in_prefill) {
        cancelled_in_prefill = true;
        context.TryCancel();
      }
    }
    long_status = reader->Finish();
  });
  const std::vector<GenerateResult> together = run_together(*batched->stub, requests);
  canceller.join();

  for (int s = 0; s < 3; ++s) expect_same_turn(alone[s], together[s], "session " + std::to_string(s));
  ASSERT_TRUE(cancelled_in_prefill.load()) << "the long prompt's prefill showed no progress to cancel at";
  EXPECT_EQ(long_status.error_code(), grpc::StatusCode::CANCELLED) << long_status.error_message();
  EXPECT_TRUE(long_tokens.empty()) << "the cancel arrived after the prefill: nothing was tested";
  // Its session as before the turn: token count and prefix digest.
  v1::SessionInfo after;
  for (int attempt = 0; attempt < 500; ++attempt) {
    after = session_info(*batched->stub, "s3");
    if (!after.busy()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(after.busy());
  EXPECT_EQ(after.token_count(), before.token_count());
  EXPECT_EQ(after.prefix_digest(), before.prefix_digest());
  EXPECT_EQ(after.turn_count(), before.turn_count());
}

TEST(EdgeBatchTest, AClientLeavingMidAnswerLeavesTheOthersIdenticalAndItsSessionHoldsWhatItWasSent) {
  std::unique_ptr<Edge> one = start_edge(kjv_q4_0_path(), batch_options(1));
  std::unique_ptr<Edge> batched = start_edge(kjv_q4_0_path(), batch_options(4));
  std::vector<v1::GenerateRequest> requests;
  for (int s = 0; s < 3; ++s) requests.push_back(turn_request(s, 0, 16 + 7 * s, 64));
  std::vector<GenerateResult> alone;
  for (const v1::GenerateRequest& r : requests) alone.push_back(generate(*one->stub, r));

  // Session 3 asks for 600 tokens and leaves after 8.
  const v1::GenerateRequest leaving = turn_request(3, 0, 20, 600);
  std::vector<uint32_t> received;
  grpc::Status leaving_status;
  std::thread leaver([&] {
    grpc::ClientContext context;
    live_call(context, 60);
    auto reader = batched->stub->Generate(&context, leaving);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (!response.has_text()) continue;
      for (uint32_t id : response.text().token_ids()) received.push_back(id);
      if (received.size() >= 8) context.TryCancel();
    }
    leaving_status = reader->Finish();
  });
  const std::vector<GenerateResult> together = run_together(*batched->stub, requests);
  leaver.join();

  for (int s = 0; s < 3; ++s) expect_same_turn(alone[s], together[s], "session " + std::to_string(s));
  EXPECT_EQ(leaving_status.error_code(), grpc::StatusCode::CANCELLED) << leaving_status.error_message();
  ASSERT_GE(received.size(), 8u);
  ASSERT_LT(received.size(), 600u);
  v1::SessionInfo after;
  for (int attempt = 0; attempt < 500; ++attempt) {
    after = session_info(*batched->stub, "s3");
    if (!after.session_id().empty() && !after.busy()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(after.session_id().empty()) << "the session was dropped";
  // The prompt and the tokens generated so far: those received, plus at
  // most the pieces in flight when the cancel arrived (the last one sampled
  // enters the KV with the next turn).
  EXPECT_GE(after.token_count() + 1, 20u + received.size());
  EXPECT_LT(after.token_count(), 20u + 600u);
}

TEST(EdgeBatchTest, ConcurrentSpeculativeTurnsShareStepsAndGiveTheTokensOfTheSameTurnsOneAtATime) {
  std::unique_ptr<Edge> one = start_edge(kjv_q4_0_path(), batch_options(1, 8));
  std::unique_ptr<Edge> batched = start_edge(kjv_q4_0_path(), batch_options(4, 8));
  std::vector<v1::GenerateRequest> requests;
  for (int s = 0; s < kSessions; ++s) requests.push_back(turn_request(s, 0, 20 + 13 * s, 48));
  std::vector<GenerateResult> alone;
  for (const v1::GenerateRequest& r : requests) alone.push_back(generate(*one->stub, r));
  const std::vector<GenerateResult> together = run_together(*batched->stub, requests);
  uint32_t shared = 0;
  for (int s = 0; s < kSessions; ++s) {
    expect_same_turn(alone[s], together[s], "session " + std::to_string(s));
    shared = std::max(shared, together[s].stats.decode_batch_max());
  }
  // Speculative turns' passes (a token and its draft rows) join the other
  // turns' decode steps.
  EXPECT_GT(shared, 1u);
}

TEST(EdgeBatchTest, TwoTurnsOfOneSessionSentAtOnceRunOneAfterTheOther) {
  std::unique_ptr<Edge> one = start_edge(kjv_q4_0_path(), batch_options(1));
  std::unique_ptr<Edge> batched = start_edge(kjv_q4_0_path(), batch_options(4));
  // The same session's two turns, and another session's turn beside them.
  const std::vector<v1::GenerateRequest> requests = {turn_request(0, 0, 30, 24), turn_request(0, 1, 12, 24),
                                                     turn_request(1, 0, 18, 24)};
  const std::vector<GenerateResult> together = run_together(*batched->stub, requests);
  for (const GenerateResult& r : together) ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  // Either order is one at a time; the session holds both turns.
  const v1::SessionInfo s0 = session_info(*batched->stub, "s0");
  EXPECT_EQ(s0.turn_count(), 2u);
  // Request 1 continued request 0 when it found tokens held before its prompt
  // (the conversation: the KV plus the last sampled token, unless EOS).
  const v1::Stats& second = together[1].stats;
  const int64_t held_before = int64_t{second.context_tokens()} +
                              (second.finish_reason() == v1::FINISH_REASON_EOS ? 0 : 1) -
                              int64_t{second.prompt_tokens()} - int64_t{second.generated_tokens()};
  const bool first_ran_first = held_before > 0;
  // Replay that order on the one-at-a-time agent: the same tokens.
  const std::vector<size_t> order = first_ran_first ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0};
  for (size_t i : order) {
    const GenerateResult alone = generate(*one->stub, requests[i]);
    expect_same_turn(alone, together[i], "turn " + std::to_string(i));
  }
  EXPECT_EQ(session_info(*one->stub, "s0").prefix_digest(), s0.prefix_digest());
}

}  // namespace
}  // namespace baton::edge_test
