// Speculative decoding on the edge agent (GenerateRequest.speculative,
// --speculative): a real EdgeServer on loopback with the bundled model's
// Q4_0 copy, prompts from its held-out text that the reply can quote. With
// speculation the replies, the sessions' tokens and digests, and the next
// turns are the ones plain decoding gives; drafts are verified and taken.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "common/engine/speculative.h"
#include "tests/support/edge_test_env.h"

namespace baton {
namespace {

using edge_test::Edge;
using edge_test::GenerateResult;

const std::string& bundled_q4_0() {
  static const std::string path = [] {
    const std::string out = testing::make_temp_dir("speculative-edge") + "/kjv-q4_0.gguf";
    const absl::Status st = quantize_model(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf", out,
                                           QuantizeOptions{GgmlType::kQ4_0, 1});
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }();
  return path;
}

// Held-out lines [first, first + lines), then the first words of the first.
std::string quote_prompt(size_t first, size_t lines) {
  std::ifstream in(testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.txt");
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string text;
  for (size_t i = first; i < first + lines; ++i) text += all.at(i) + "\n";
  std::stringstream words(all.at(first));
  for (int i = 0; i < 5; ++i) {
    std::string word;
    words >> word;
    text += (i ? " " : "") + word;
  }
  return text;
}

v1::GenerateRequest request(const std::string& text, const std::string& session, uint32_t speculative,
                            uint32_t max_tokens = 48) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.set_session_id(session);
  r.set_policy(v1::SPLIT_POLICY_LOCAL);
  r.mutable_sampling()->set_temperature(0.0f);
  r.set_max_tokens(max_tokens);
  r.set_speculative(speculative);
  return r;
}

class SpeculativeDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EdgeServiceOptions options = edge_test::edge_options("");
    options.threads = 2;
    options.max_tokens = 48;
    edge_ = edge_test::start_edge(bundled_q4_0(), options);
    ASSERT_NE(edge_->stub, nullptr);
  }
  GenerateResult generate(const v1::GenerateRequest& r) { return edge_test::generate(*edge_->stub, r); }

  std::unique_ptr<Edge> edge_;
};

TEST_F(SpeculativeDecodeTest, GreedyRepliesAndSessionsAreThoseOfPlainDecoding) {
  // Two turns on two sessions, one speculative, one plain: every reply, and
  // what each session holds after each turn, agree.
  const std::string turns[] = {quote_prompt(0, 5), "\n" + quote_prompt(30, 4)};
  uint64_t accepted = 0;
  for (const std::string& text : turns) {
    const GenerateResult spec = generate(request(text, "spec", 8));
    const GenerateResult plain = generate(request(text, "plain", 0));
    ASSERT_TRUE(spec.status.ok()) << spec.status.error_message();
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.text, plain.text);
    EXPECT_EQ(spec.stats.finish_reason(), plain.stats.finish_reason());
    EXPECT_EQ(spec.stats.context_tokens(), plain.stats.context_tokens());
    EXPECT_EQ(plain.stats.speculative_drafted(), 0u);
    EXPECT_GT(spec.stats.speculative_drafted(), 0u);
    EXPECT_LE(spec.stats.speculative_accepted(), spec.stats.speculative_drafted());
    accepted += spec.stats.speculative_accepted();
    const v1::SessionInfo a = edge_test::session_info(*edge_->stub, "spec");
    const v1::SessionInfo b = edge_test::session_info(*edge_->stub, "plain");
    EXPECT_EQ(a.token_count(), b.token_count());
    EXPECT_EQ(a.prefix_digest(), b.prefix_digest());
  }
  EXPECT_GT(accepted, 0u);  // drafts were taken: speculation saved decode steps
}

TEST_F(SpeculativeDecodeTest, SeededSamplingDrawsTheSameTokens) {
  const std::string text = quote_prompt(12, 4);
  for (uint32_t seed : {3u, 4u, 5u}) {
    v1::GenerateRequest spec_request = request(text, "", 8, 32);
    spec_request.mutable_sampling()->set_temperature(0.9f);
    spec_request.mutable_sampling()->set_seed(seed);
    v1::GenerateRequest plain_request = spec_request;
    plain_request.set_speculative(0);
    const GenerateResult spec = generate(spec_request);
    const GenerateResult plain = generate(plain_request);
    ASSERT_TRUE(spec.status.ok() && plain.status.ok()) << spec.status.error_message();
    EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
  }
}

TEST_F(SpeculativeDecodeTest, AStopStringInsideATakenDraftEndsTheReplyWhereItWouldHave) {
  const std::string text = quote_prompt(0, 5);
  const GenerateResult full = generate(request(text, "", 0));
  ASSERT_TRUE(full.status.ok());
  // A stop string from the middle of the plain reply (past its first tokens,
  // where drafts are running).
  ASSERT_GT(full.text.size(), 40u);
  const std::string stop = full.text.substr(30, 6);
  v1::GenerateRequest spec_request = request(text, "s1", 8);
  spec_request.add_stop(stop);
  v1::GenerateRequest plain_request = request(text, "s2", 0);
  plain_request.add_stop(stop);
  const GenerateResult spec = generate(spec_request);
  const GenerateResult plain = generate(plain_request);
  ASSERT_TRUE(spec.status.ok() && plain.status.ok());
  EXPECT_EQ(plain.stats.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(spec.stats.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(spec.text, plain.text);
  EXPECT_EQ(spec.stats.context_tokens(), plain.stats.context_tokens());
  // The next turn continues both sessions identically: the KV holds the
  // same tokens.
  const GenerateResult next_spec = generate(request("\nAnd", "s1", 8, 16));
  const GenerateResult next_plain = generate(request("\nAnd", "s2", 0, 16));
  EXPECT_EQ(next_spec.tokens, next_plain.tokens);
}

// --draft: the bundled model's F16 source drafts for its Q4_0 copy (the
// same tokenizer). Free text (little for prompt lookup to find), several
// turns at once: replies and sessions are plain decoding's, and the draft
// model's guesses were taken.
TEST(SpeculativeDraftModelTest, RepliesAreThoseOfPlainDecodingAndTheDraftModelsGuessesAreTaken) {
  EdgeServiceOptions options = edge_test::edge_options("");
  options.threads = 2;
  options.max_tokens = 48;
  options.draft_model_path = testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf";
  std::unique_ptr<Edge> edge = edge_test::start_edge(bundled_q4_0(), options);
  ASSERT_NE(edge->stub, nullptr);
  const std::string prompts[] = {"And the LORD said unto Moses,", "Blessed are they", "In the beginning"};
  std::vector<std::thread> threads;
  GenerateResult spec[3], plain[3];
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { spec[i] = edge_test::generate(*edge->stub, request(prompts[i], "d" + std::to_string(i), 4)); });
  }
  for (std::thread& t : threads) t.join();
  uint64_t drafted = 0, accepted = 0;
  for (int i = 0; i < 3; ++i) {
    plain[i] = edge_test::generate(*edge->stub, request(prompts[i], "p" + std::to_string(i), 0));
    ASSERT_TRUE(spec[i].status.ok()) << spec[i].status.error_message();
    ASSERT_TRUE(plain[i].status.ok()) << plain[i].status.error_message();
    EXPECT_EQ(spec[i].tokens, plain[i].tokens) << prompts[i];
    EXPECT_EQ(spec[i].stats.context_tokens(), plain[i].stats.context_tokens());
    const v1::SessionInfo a = edge_test::session_info(*edge->stub, "d" + std::to_string(i));
    const v1::SessionInfo b = edge_test::session_info(*edge->stub, "p" + std::to_string(i));
    EXPECT_EQ(a.prefix_digest(), b.prefix_digest());
    drafted += spec[i].stats.speculative_drafted();
    accepted += spec[i].stats.speculative_accepted();
  }
  // Prompt lookup alone takes few drafts in 48 tokens of free text; with
  // the draft model most are taken.
  EXPECT_GT(drafted, 0u);
  EXPECT_GT(accepted * 2, drafted) << accepted << "/" << drafted;
}

TEST(SpeculativeDraftModelTest, ADraftModelWithAnotherTokenizerFailsTheLoadNamingIt) {
  EdgeServiceOptions options = edge_test::edge_options("");
  options.draft_model_path = testing::synth_model_path("tiny", GgmlType::kF16);
  auto service = std::make_unique<EdgeService>(options);
  const absl::Status status = service->Load(bundled_q4_0());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("tokenizer"), std::string::npos) << status;
}

TEST_F(SpeculativeDecodeTest, OutOfRangeIsInvalidArgumentNamingTheBound) {
  const GenerateResult r = generate(request("In the beginning", "", kMaxSpeculativeTokens + 1));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("at most 16"), std::string::npos) << r.status.error_message();
}

}  // namespace
}  // namespace baton
