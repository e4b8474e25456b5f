// Real-server tests of the overlapped prefill (issue 20, part 4): the edge
// prefills [have, a) while the cloud streams [a, n-1). With the lossless f16
// codec, a = have is the cloud path, a = n-1 the local path, and every a in
// between gives the local path's tokens and log-probabilities bit for bit,
// on a first turn and on a continuing session. Every pin of the cloud path
// still holds on the streamed part (fingerprint, positions, token ids, a
// stream failing mid-way): the session is unchanged under policy cloud, and
// auto finishes locally from the edge's part and says so.
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "tests/integration/faulty_prefill.h"
#include "tests/support/edge_test_env.h"

namespace baton::edge_test {
namespace {

v1::GenerateRequest split_request(const std::vector<uint32_t>& tokens, const std::string& session_id,
                                  v1::SplitPolicy policy, std::optional<uint32_t> split_position) {
  v1::GenerateRequest request = greedy_request(tokens, session_id, policy);
  request.set_logprobs(0);  // each token's log-probability: equal only if the logits are
  if (split_position) request.set_split_position(*split_position);
  return request;
}

class EdgeOverlapTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EdgeOverlapTest, EverySplitOfAnF16PromptGivesTheLocalTokens) {
  const std::string& model_path = edge_model_path(GetParam());
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);

  const std::vector<uint32_t> turn = prompt(45, 1);  // n - 1 = 44
  const GenerateResult local = generate(*edge->stub, split_request(turn, "", v1::SPLIT_POLICY_LOCAL, {}));
  const GenerateResult cloud_only = generate(*edge->stub, split_request(turn, "", v1::SPLIT_POLICY_CLOUD, {}));
  ASSERT_TRUE(local.status.ok()) << local.status.error_message();
  ASSERT_TRUE(cloud_only.status.ok()) << cloud_only.status.error_message();
  ASSERT_FALSE(local.tokens.empty());
  ASSERT_EQ(local.logprobs.size(), local.tokens.size());
  EXPECT_EQ(cloud_only.tokens, local.tokens);

  struct Case {
    uint32_t a;
    v1::PrefillPlace place;
  };
  for (const Case& c : {Case{0, v1::PREFILL_PLACE_CLOUD}, Case{1, v1::PREFILL_PLACE_OVERLAP},
                        Case{17, v1::PREFILL_PLACE_OVERLAP}, Case{43, v1::PREFILL_PLACE_OVERLAP},
                        Case{44, v1::PREFILL_PLACE_LOCAL}}) {
    SCOPED_TRACE("split_position " + std::to_string(c.a));
    const GenerateResult split = generate(*edge->stub, split_request(turn, "", v1::SPLIT_POLICY_CLOUD, c.a));
    ASSERT_TRUE(split.status.ok()) << split.status.error_message();
    const v1::Plan& plan = split.stats.plan();
    EXPECT_EQ(plan.place(), c.place) << plan.reason();
    EXPECT_EQ(plan.split_position(), c.a);
    EXPECT_EQ(plan.local_tokens(), c.a);
    EXPECT_EQ(plan.cloud_tokens(), 44 - c.a);
    EXPECT_EQ(split.stats.fallback_reason(), "");
    EXPECT_EQ(split.tokens, c.a == 0 ? cloud_only.tokens : local.tokens);
    EXPECT_EQ(split.logprobs, local.logprobs) << "f16 split == local, bit for bit";
    if (c.place == v1::PREFILL_PLACE_OVERLAP) {
      EXPECT_NE(plan.reason().find("forced by the request's split_position"), std::string::npos) << plan.reason();
      EXPECT_GT(split.stats.overlap_local_prefill_ms(), 0.0);
      // Only the cloud's part crossed the wire: F16-equivalent bytes of 44 - a positions.
      EXPECT_EQ(split.stats.kv_raw_bytes() * 44, cloud_only.stats.kv_raw_bytes() * (44 - c.a));
      EXPECT_LT(split.stats.kv_wire_bytes(), cloud_only.stats.kv_wire_bytes());
    }
  }
}

TEST_P(EdgeOverlapTest, AContinuingSessionOverlapsAndGoesOnAsLocal) {
  const std::string& model_path = edge_model_path(GetParam());
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);

  const std::vector<std::vector<uint32_t>> turns = {prompt(30, 1), prompt(26, 2), prompt(20, 3)};
  for (size_t t = 0; t < turns.size(); ++t) {
    SCOPED_TRACE("turn " + std::to_string(t + 1));
    const int64_t have = std::max<int64_t>(session_tokens(*edge->stub, "o"), 0);
    // Turn 1 and 2 overlapped (in the middle of the new positions), turn 3 from the cloud alone.
    const uint32_t a = static_cast<uint32_t>(have) + (t < 2 ? static_cast<uint32_t>(turns[t].size()) / 2 : 0);
    const GenerateResult reference = generate(*edge->stub, split_request(turns[t], "ref", v1::SPLIT_POLICY_LOCAL, {}));
    const GenerateResult split = generate(*edge->stub, split_request(turns[t], "o", v1::SPLIT_POLICY_CLOUD, a));
    ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
    ASSERT_TRUE(split.status.ok()) << split.status.error_message();
    EXPECT_EQ(split.stats.plan().reused_tokens(), have);
    EXPECT_EQ(split.stats.plan().split_position(), a);
    EXPECT_EQ(split.stats.plan().place(), t < 2 ? v1::PREFILL_PLACE_OVERLAP : v1::PREFILL_PLACE_CLOUD)
        << split.stats.plan().reason();
    EXPECT_EQ(split.tokens, reference.tokens);
    EXPECT_EQ(split.logprobs, reference.logprobs);
    EXPECT_EQ(session_tokens(*edge->stub, "o"), session_tokens(*edge->stub, "ref"));
  }
}

// tiny-gemma3: sliding-window layers (window 8) on both sides of the split.
INSTANTIATE_TEST_SUITE_P(Shapes, EdgeOverlapTest, ::testing::Values("tiny", "tiny-gemma3"));

TEST(EdgeOverlapRequestTest, SplitPositionOutsideThePromptIsInvalidArgumentNamingTheBounds) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(cloud->address()));
  ASSERT_NE(edge->stub, nullptr);
  ASSERT_TRUE(generate(*edge->stub, split_request(prompt(20, 1), "v", v1::SPLIT_POLICY_LOCAL, {})).status.ok());
  const int64_t have = session_tokens(*edge->stub, "v");
  ASSERT_GT(have, 0);
  const std::vector<uint32_t> turn = prompt(10, 2);
  const int64_t last = have + 10;  // n - 1: the session's tokens (KV + the last sampled one) + the turn - 1

  const std::string bounds = "outside [" + std::to_string(have) + ", " + std::to_string(last) + "]";
  for (int64_t a : {have - 1, last + 1}) {
    const GenerateResult refused =
        generate(*edge->stub, split_request(turn, "v", v1::SPLIT_POLICY_CLOUD, static_cast<uint32_t>(a)));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.status.error_message();
    EXPECT_NE(refused.status.error_message().find(bounds), std::string::npos) << refused.status.error_message();
    EXPECT_EQ(session_tokens(*edge->stub, "v"), have);
  }
  const GenerateResult local_only = generate(
      *edge->stub, split_request(turn, "v", v1::SPLIT_POLICY_LOCAL, static_cast<uint32_t>(have + 2)));
  EXPECT_EQ(local_only.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(local_only.status.error_message().find("policy local never contacts the cloud"), std::string::npos)
      << local_only.status.error_message();
  EXPECT_EQ(session_tokens(*edge->stub, "v"), have);
  // n-1 under policy local is its own plan.
  const GenerateResult at_end =
      generate(*edge->stub, split_request(turn, "v", v1::SPLIT_POLICY_LOCAL, static_cast<uint32_t>(last)));
  ASSERT_TRUE(at_end.status.ok()) << at_end.status.error_message();
  EXPECT_EQ(at_end.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
}

TEST(EdgeOverlapRequestTest, AutoOverlapsWhenTheLinesSaySo) {
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(model_path);
  EdgeServiceOptions options = edge_options(cloud->address());
  options.assumed_local_prefill_tokens_per_s = 0.01;  // local is hopeless: auto never keeps it all
  std::unique_ptr<Edge> edge = start_edge(model_path, options);
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);
  const GenerateResult result = generate(*edge->stub, split_request(prompt(40, 4), "", v1::SPLIT_POLICY_AUTO, 20));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.stats.plan().place(), v1::PREFILL_PLACE_OVERLAP) << result.stats.plan().reason();
  EXPECT_EQ(result.stats.plan().split_position(), 20u);
  EXPECT_EQ(result.stats.fallback_reason(), "");
  // A quantized store takes the cloud's part as it takes a whole segment.
  v1::GenerateRequest int8 = split_request(prompt(40, 4), "q", v1::SPLIT_POLICY_CLOUD, 25);
  int8.mutable_codec()->set_codec(v1::KV_CODEC_INT8);
  const GenerateResult quantized = generate(*edge->stub, int8);
  ASSERT_TRUE(quantized.status.ok()) << quantized.status.error_message();
  EXPECT_EQ(quantized.stats.plan().place(), v1::PREFILL_PLACE_OVERLAP) << quantized.stats.plan().reason();
  EXPECT_EQ(quantized.stats.plan().cloud_tokens(), 14u);
  EXPECT_GT(quantized.stats.kv_wire_bytes(), 0u);
  EXPECT_EQ(session_tokens(*edge->stub, "q"), 39 + static_cast<int64_t>(quantized.tokens.size()));
}

// A fault of the cloud's part of an overlapped turn.
struct OverlapFault {
  const char* name;
  FaultyPrefill::Fault fault;
  bool other_model;        // the cloud serves another model (fingerprint mismatch)
  grpc::StatusCode code;   // under policy cloud
  const char* why;         // in the message / fallback reason
};

class EdgeOverlapFaultTest : public ::testing::TestWithParam<OverlapFault> {};

TEST_P(EdgeOverlapFaultTest, ABadStreamLeavesTheSessionUnchangedOrFinishesLocally) {
  const OverlapFault& fault = GetParam();
  const std::string& model_path = edge_model_path("tiny");
  std::unique_ptr<Cloud> cloud = start_cloud(fault.other_model ? edge_model_path("tiny", /*seed=*/2) : model_path);
  std::unique_ptr<FaultyCloud> faulty = start_faulty_cloud(cloud->address(), fault.fault);
  std::unique_ptr<Edge> edge = start_edge(model_path, edge_options(faulty->address()));
  ASSERT_NE(edge->stub, nullptr);
  wait_for_cloud(*edge->stub);

  const std::vector<uint32_t> turn1 = prompt(20, 5);
  const std::vector<uint32_t> turn2 = prompt(40, 6);
  ASSERT_TRUE(generate(*edge->stub, split_request(turn1, "s", v1::SPLIT_POLICY_LOCAL, {})).status.ok());
  ASSERT_TRUE(generate(*edge->stub, split_request(turn1, "ref", v1::SPLIT_POLICY_LOCAL, {})).status.ok());
  const int64_t before = session_tokens(*edge->stub, "s");
  const uint32_t a = static_cast<uint32_t>(before) + 15;

  const GenerateResult refused = generate(*edge->stub, split_request(turn2, "s", v1::SPLIT_POLICY_CLOUD, a));
  EXPECT_EQ(refused.status.error_code(), fault.code) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find(fault.why), std::string::npos) << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty());
  EXPECT_EQ(session_tokens(*edge->stub, "s"), before);

  const GenerateResult fell_back = generate(*edge->stub, split_request(turn2, "s", v1::SPLIT_POLICY_AUTO, a));
  const GenerateResult reference = generate(*edge->stub, split_request(turn2, "ref", v1::SPLIT_POLICY_LOCAL, {}));
  ASSERT_TRUE(fell_back.status.ok()) << fell_back.status.error_message();
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  const std::string& why = fell_back.stats.fallback_reason();
  EXPECT_NE(why.find(fault.why), std::string::npos) << why;
  EXPECT_NE(why.find("the edge had prefilled [" + std::to_string(before) + ", " + std::to_string(a) + ")"),
            std::string::npos)
      << why;
  EXPECT_EQ(fell_back.stats.plan().place(), v1::PREFILL_PLACE_LOCAL);
  EXPECT_EQ(fell_back.stats.plan().cloud_tokens(), 0u);
  EXPECT_EQ(fell_back.tokens, reference.tokens);
  EXPECT_EQ(fell_back.logprobs, reference.logprobs);
  EXPECT_EQ(session_tokens(*edge->stub, "s"), session_tokens(*edge->stub, "ref"));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EdgeOverlapFaultTest,
    ::testing::Values(
        OverlapFault{"WrongFingerprint", FaultyPrefill::Fault::kNone, true, grpc::StatusCode::FAILED_PRECONDITION,
                     "weights_digest"},
        OverlapFault{"CorruptBlock", FaultyPrefill::Fault::kCorruptBlock, false, grpc::StatusCode::DATA_LOSS,
                     "checksum"},
        OverlapFault{"TruncatedStream", FaultyPrefill::Fault::kTruncate, false, grpc::StatusCode::DATA_LOSS,
                     "trailer"},
        OverlapFault{"ShiftedFirstPosition", FaultyPrefill::Fault::kShiftFirstPosition, false,
                     grpc::StatusCode::FAILED_PRECONDITION, "context mismatch: first_position"},
        // The segment's token ids come with the digest of the whole prefix: a
        // changed id shows there first.
        OverlapFault{"ChangedTokenId", FaultyPrefill::Fault::kChangeToken, false,
                     grpc::StatusCode::FAILED_PRECONDITION, "context mismatch: prefix_digest"}),
    [](const ::testing::TestParamInfo<OverlapFault>& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace baton::edge_test
