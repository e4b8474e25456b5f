// ContextLimit (common/engine/context_limit.h): the smaller of the trained
// context and the KV memory budget binds, and every message names the one
// that binds with both numbers; prompt + max_tokens past it clamps max_tokens
// with a warning.
#include "common/engine/context_limit.h"

#include <string>

#include <gtest/gtest.h>

#include "common/kv_codec/kv_codec_config.h"
#include "common/model/model_spec.h"
#include "edge_decode/plan/memory_plan.h"

namespace baton {
namespace {

ContextLimit trained_binds() {
  ContextLimit limit;
  limit.trained_tokens = 1024;
  limit.memory_tokens = 47185;
  limit.memory_detail = "codec int4-g32 (KV budget 21.54 GiB = ...; 480 B per token)";
  return limit;
}

TEST(ContextLimitTest, TrainedContextBindsAndTheErrorNamesIt) {
  const ContextLimit limit = trained_binds();
  EXPECT_FALSE(limit.memory_binds());
  EXPECT_EQ(limit.max_tokens(), 1024);
  EXPECT_TRUE(check_context_fits(limit, 0, 1024).ok());
  const absl::Status refused = check_context_fits(limit, 0, 2178);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(refused.message());
  EXPECT_NE(message.find("session needs 2178 tokens; the model's trained context is 1024 tokens"),
            std::string::npos)
      << message;
  // Memory is named as what does not bind, with its number.
  EXPECT_NE(message.find("memory is not the limit (this device fits 47185 with codec int4-g32"), std::string::npos)
      << message;
}

TEST(ContextLimitTest, MemoryBudgetBindsAndTheErrorKeepsItsWording) {
  ContextLimit limit = trained_binds();
  limit.trained_tokens = 131072;
  EXPECT_TRUE(limit.memory_binds());
  EXPECT_EQ(limit.max_tokens(), 47185);
  const absl::Status refused = check_context_fits(limit, 40000, 9000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(refused.message());
  EXPECT_NE(message.find("session needs 49000 tokens; this device fits 47185 with codec int4-g32"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("40000 held + 9000 of this prompt"), std::string::npos) << message;
  EXPECT_NE(message.find("the model's trained context is 131072 tokens"), std::string::npos) << message;
}

TEST(ContextLimitTest, LocalModeHasNoMemoryBudget) {
  ContextLimit limit;
  limit.trained_tokens = 1024;
  EXPECT_EQ(limit.max_tokens(), 1024);
  const std::string message(check_context_fits(limit, 0, 2178).message());
  EXPECT_NE(message.find("the model's trained context is 1024 tokens"), std::string::npos) << message;
  EXPECT_EQ(message.find("memory"), std::string::npos) << message;
}

TEST(ContextLimitTest, MaxTokensPastTheLimitIsClampedWithAWarning) {
  const ContextLimit limit = trained_binds();
  EXPECT_EQ(generation_room(limit, 900, 100), 100);
  EXPECT_EQ(context_overflow_warning(limit, 900, 124), "");
  EXPECT_EQ(generation_room(limit, 900, 200), 124);
  EXPECT_EQ(generation_room(limit, 1024, 200), 0);
  const std::string warning = context_overflow_warning(limit, 900, 200);
  EXPECT_NE(warning.find("900 + 200 = 1100 tokens exceed the model's trained context of 1024 tokens: at most "
                         "124 tokens will be generated"),
            std::string::npos)
      << warning;
}

TEST(ContextLimitTest, TheEdgeMemoryPlanGivesBothNumbers) {
  ModelSpec spec;
  spec.arch = "llama";
  spec.n_layer = 2;
  spec.n_embd = 64;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.head_dim = 16;
  spec.n_ff = 128;
  spec.n_vocab = 512;
  spec.n_ctx_train = 1024;
  const absl::StatusOr<KvCodecConfig> int4 = parse_kv_codec_config("int4-g16");
  ASSERT_TRUE(int4.ok()) << int4.status();
  const EdgeMemoryPlan plan = make_memory_plan(spec, 1 << 20, uint64_t{1} << 30, {*int4});
  const ContextLimit limit = context_limit(plan, plan.capacity[0], spec.n_ctx_train);
  EXPECT_EQ(limit.trained_tokens, 1024);
  // Uncapped: what the budget would hold, far past the trained context.
  EXPECT_EQ(static_cast<uint64_t>(limit.memory_tokens), plan.kv_budget_bytes / plan.capacity[0].kv_bytes_per_token);
  EXPECT_FALSE(limit.memory_binds());
  EXPECT_EQ(limit.max_tokens(), plan.capacity[0].max_context_tokens);  // Health's figure
  EXPECT_NE(limit.memory_detail.find("codec int4"), std::string::npos) << limit.memory_detail;
}

}  // namespace
}  // namespace baton
