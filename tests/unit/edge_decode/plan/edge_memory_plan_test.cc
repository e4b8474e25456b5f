// The edge memory plan: budget = limit - weights - scratch - headroom, max
// context = budget / KV bytes per token (capped at n_ctx_train), and the
// over-budget error carries the numbers (context_limit + check_context_fits).
#include "edge_decode/plan/memory_plan.h"

#include <gtest/gtest.h>

#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model_spec.h"

namespace baton {
namespace {

ModelSpec llama_1b_spec() {
  ModelSpec spec;
  spec.arch = "llama";
  spec.n_layer = 16;
  spec.n_embd = 2048;
  spec.n_head = 32;
  spec.n_head_kv = 8;
  spec.head_dim = 64;
  spec.n_ff = 8192;
  spec.n_vocab = 128256;
  spec.n_ctx_train = 131072;
  return spec;
}

KvCodecConfig codec(const char* name) {
  absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(name);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TEST(MemoryPlanTest, BudgetIsLimitMinusWeightsScratchAndHeadroom) {
  const ModelSpec spec = llama_1b_spec();
  const uint64_t limit = uint64_t{2} << 30;
  const uint64_t weights = 700ull << 20;
  const EdgeMemoryPlan plan = make_memory_plan(spec, weights, limit, {codec("int4-g32"), codec("f16")});
  EXPECT_EQ(plan.device_limit_bytes, limit);
  EXPECT_EQ(plan.weights_bytes, weights);
  EXPECT_EQ(plan.scratch_bytes, engine_scratch_bytes(spec));
  EXPECT_GT(plan.scratch_bytes, 0u);
  // 5% of 2 GiB is above the 64 MiB floor.
  EXPECT_EQ(plan.headroom_bytes, static_cast<uint64_t>(0.05 * static_cast<double>(limit)));
  EXPECT_EQ(plan.kv_budget_bytes, limit - weights - plan.scratch_bytes - plan.headroom_bytes);
  ASSERT_EQ(plan.capacity.size(), 2u);
  const KvGeometry geometry{16, 32, 8, 64, {}};
  // f16: 2 (K,V) x 16 layers x 512 x 2 bytes = 32 KiB per token.
  EXPECT_EQ(plan.capacity[1].kv_bytes_per_token, 32768u);
  EXPECT_EQ(plan.capacity[1].max_context_tokens, plan.kv_budget_bytes / 32768u);
  EXPECT_EQ(plan.capacity[0].kv_bytes_per_token,
            static_cast<uint64_t>(QuantizedKvCache::bytes_per_token(plan.capacity[0].codec, geometry)));
  // INT4 fits several times more tokens than F16 (the default, first).
  EXPECT_GT(plan.capacity[0].max_context_tokens, 3 * plan.capacity[1].max_context_tokens);
}

TEST(MemoryPlanTest, HeadroomHasA64MiBFloorAndContextIsCappedAtTraining) {
  ModelSpec spec = llama_1b_spec();
  spec.n_ctx_train = 1000;
  const uint64_t limit = 1ull << 30;
  const EdgeMemoryPlan plan = make_memory_plan(spec, 100ull << 20, limit, {codec("f16")});
  EXPECT_EQ(plan.headroom_bytes, kMinHeadroomBytes);  // 5% of 1 GiB = 51 MiB < 64 MiB
  ASSERT_EQ(plan.capacity.size(), 1u);
  EXPECT_EQ(plan.capacity[0].max_context_tokens, 1000u);
}

TEST(MemoryPlanTest, WeightsBeyondTheLimitLeaveNoKvBudget) {
  const EdgeMemoryPlan plan = make_memory_plan(llama_1b_spec(), 3ull << 30, 2ull << 30, {codec("int8-g32")});
  EXPECT_EQ(plan.kv_budget_bytes, 0u);
  EXPECT_EQ(plan.capacity[0].max_context_tokens, 0u);
}

TEST(MemoryPlanTest, FindMatchesByStoreConfig) {
  const EdgeMemoryPlan plan =
      make_memory_plan(llama_1b_spec(), 700ull << 20, 2ull << 30, {codec("int4-g32"), codec("f16")});
  // The zstd level and layout are wire choices: the store is the same.
  const CodecCapacityPlan* found = plan.find(codec("f16-z3"));
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->codec.bits, KvCodecConfig::Bits::kF16);
  EXPECT_EQ(plan.find(codec("int8-g32")), nullptr);
}

TEST(MemoryPlanTest, OverBudgetErrorNamesTokensLimitAndCodec) {
  const EdgeMemoryPlan plan = make_memory_plan(llama_1b_spec(), 700ull << 20, 2ull << 30, {codec("f16")});
  const absl::Status status =
      check_context_fits(context_limit(plan, plan.capacity[0], llama_1b_spec().n_ctx_train), 0, 90000);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(status.message());
  EXPECT_NE(message.find("session needs 90000 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("fits " + std::to_string(plan.capacity[0].max_context_tokens)), std::string::npos)
      << message;
  EXPECT_NE(message.find("codec f16"), std::string::npos) << message;
  EXPECT_NE(message.find("limit 2.00 GiB"), std::string::npos) << message;
  EXPECT_NE(message.find("32.0 KiB per token"), std::string::npos) << message;
}

TEST(MemoryPlanTest, ProtoCarriesEveryField) {
  const EdgeMemoryPlan plan =
      make_memory_plan(llama_1b_spec(), 700ull << 20, 2ull << 30, {codec("int4-g32"), codec("f16")});
  v1::MemoryPlan proto;
  to_proto(plan, 12345, &proto);
  EXPECT_EQ(proto.device_limit_bytes(), plan.device_limit_bytes);
  EXPECT_EQ(proto.weights_bytes(), plan.weights_bytes);
  EXPECT_EQ(proto.scratch_bytes(), plan.scratch_bytes);
  EXPECT_EQ(proto.headroom_bytes(), plan.headroom_bytes);
  EXPECT_EQ(proto.kv_budget_bytes(), plan.kv_budget_bytes);
  EXPECT_EQ(proto.kv_used_bytes(), 12345u);
  ASSERT_EQ(proto.capacity_size(), 2);
  EXPECT_EQ(proto.capacity(0).codec().codec(), v1::KV_CODEC_INT4);
  EXPECT_EQ(proto.capacity(1).codec().codec(), v1::KV_CODEC_F16);
  EXPECT_EQ(proto.capacity(1).max_context_tokens(), plan.capacity[1].max_context_tokens);
}

TEST(MemoryPlanTest, DetectsSomeDeviceMemory) { EXPECT_GT(detect_device_memory_bytes(), 0u); }

}  // namespace
}  // namespace baton
