// `baton generate --model` (tools/cli/local_turn.h) keeps the prompt's KV in
// the edge agent's quantized store, filled as the agent fills it, so its
// greedy answer is the agent's answer to the same prompt: checked against a
// real EdgeService on loopback (no cloud, local prefill) for the agent's
// default codec and the other widths.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "edge_decode/link/transform_coders.h"
#include "edge_decode/plan/default_codec.h"
#include "local_turn.h"
#include "tests/support/edge_test_env.h"

namespace baton {
namespace {

using edge_test::Edge;
using edge_test::GenerateResult;

class LocalGenerateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalGenerateTest, LocalPathUsesTheAgentsStoreAndAnswersAsTheAgent) {
  const std::string codec = GetParam();  // "" = both sides' default
  const std::string& model_path = edge_test::edge_model_path("tiny");
  EdgeServiceOptions options = edge_test::edge_options("");  // no cloud: the agent prefills locally
  options.codec = codec.empty() ? kEdgeFallbackCodec : codec;  // baton-edge's default under --policy local
  std::unique_ptr<Edge> edge = edge_test::start_edge(model_path, options);
  ASSERT_NE(edge->stub, nullptr);
  const std::vector<uint32_t> ids = edge_test::prompt(45, 1);
  v1::GenerateRequest request = edge_test::greedy_request(ids, "", v1::SPLIT_POLICY_LOCAL, 12);
  request.clear_codec();  // the agent's default
  const GenerateResult agent = edge_test::generate(*edge->stub, request);
  ASSERT_TRUE(agent.status.ok()) << agent.status.error_message();
  ASSERT_FALSE(agent.tokens.empty());

  auto model = Model::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = Tokenizer::FromGguf((*model)->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  Engine engine(**model, EngineOptions{1, 64});
  const KvGeometry geometry = engine.kv_geometry();
  absl::StatusOr<KvCodecConfig> wire = cli::local_kv_codec(codec, geometry);
  ASSERT_TRUE(wire.ok()) << wire.status();
  const std::vector<int32_t> prompt(ids.begin(), ids.end());
  auto store = cli::new_local_kv_store(*wire, geometry, static_cast<int64_t>(prompt.size()) + 12);
  ASSERT_TRUE(store.ok()) << store.status();
  // The agent's store for its default codec: quantized, never the F32 cache.
  absl::StatusOr<KvCodecConfig> agent_wire = default_codec_from_name(options.codec, geometry);
  ASSERT_TRUE(agent_wire.ok());
  EXPECT_EQ((*store)->config(), edge_store_config(*agent_wire, geometry));
  if (codec.empty()) {
    EXPECT_EQ((*store)->config().bits, KvCodecConfig::Bits::kInt4);
  }

  Sampler sampler(SamplingParams{});  // temperature 0: greedy
  auto turn = cli::run_local_turn(engine, **store, sampler, prompt, 12,
                                  [&](int32_t token) { return !(*tokenizer)->is_eog(token); });
  ASSERT_TRUE(turn.ok()) << turn.status();
  std::vector<uint32_t> local(turn->tokens.begin(), turn->tokens.end());
  // The agent does not stream an end-of-generation token.
  const bool ends_with_eog = !local.empty() && (*tokenizer)->is_eog(static_cast<int32_t>(local.back()));
  if (ends_with_eog && agent.tokens.size() < local.size()) {
    local.pop_back();
  }
  EXPECT_EQ(local, agent.tokens) << "codec " << options.codec;
  // The prompt and every generated token but the last are in the store.
  EXPECT_EQ((*store)->size(), static_cast<int64_t>(prompt.size() + turn->tokens.size()) - 1);
}

INSTANTIATE_TEST_SUITE_P(Codecs, LocalGenerateTest, ::testing::Values("", "int8", "f16"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param.empty() ? std::string("default") : param_info.param;
                         });

TEST(LocalKvCodecTest, DefaultIsTheAgentsFallbackAndTransformCodecsAreRefused) {
  const KvGeometry geometry{2, 4, 2, 64, {}};
  absl::StatusOr<KvCodecConfig> fallback = cli::local_kv_codec("", geometry);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(*fallback, default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry));
  EXPECT_EQ(*cli::local_kv_codec("auto", geometry), *fallback);
  EXPECT_EQ(cli::local_kv_codec("int8", geometry)->bits, KvCodecConfig::Bits::kInt8);
  absl::StatusOr<KvCodecConfig> transform = cli::local_kv_codec("tc-b2", geometry);
  ASSERT_FALSE(transform.ok());
  EXPECT_NE(transform.status().message().find("KV calibration"), std::string::npos) << transform.status();
  EXPECT_FALSE(cli::local_kv_codec("int3", geometry).ok());
}

}  // namespace
}  // namespace baton
