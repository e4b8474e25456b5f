// Context overflow (edge_decode/generate/context_overflow.h): truncation
// keeps the kept prefix (a pack is never dropped), drops the fewest oldest
// whole turns so that the rest, the prompt and room for the reply fit, and
// says so in words; the prefix's KV is copied into the new store bit for bit.
#include "edge_decode/generate/context_overflow.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/kv_cache/quantized_kv_cache.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::ElementsAre;

// `count` turns of `tokens_each` tokens after a prefix of `prefix` tokens,
// numbered from `first_number`.
std::vector<SessionTurn> turns_of(int count, int tokens_each, int prefix, uint32_t first_number = 1) {
  std::vector<SessionTurn> turns;
  for (int i = 0; i < count; ++i) {
    turns.push_back({first_number + static_cast<uint32_t>(i), static_cast<uint32_t>(prefix + i * tokens_each)});
  }
  return turns;
}

TruncationInputs inputs(const std::vector<SessionTurn>& turns, int64_t held, int64_t prefix, int64_t prompt,
                        int64_t reply, int64_t limit) {
  TruncationInputs in;
  in.held_tokens = held;
  in.turns = turns;
  in.kept_prefix = prefix;
  in.prompt_tokens = prompt;
  in.reply_tokens = reply;
  in.limit_tokens = limit;
  return in;
}

TEST(ContextOverflowTest, AConversationThatFitsWithRoomForTheReplyIsLeftAlone) {
  const std::vector<SessionTurn> turns = turns_of(4, 50, 0);
  EXPECT_FALSE(plan_truncation(inputs(turns, 200, 0, 40, 60, 300)).needed);  // 200 + 40 + 60 = 300
  EXPECT_TRUE(plan_truncation(inputs(turns, 200, 0, 40, 61, 300)).needed);
}

TEST(ContextOverflowTest, DropsTheFewestOldestWholeTurnsAndKeepsThePack) {
  // Pack of 64, turns 1-16 of 100 tokens each: 1664 held.
  const std::vector<SessionTurn> turns = turns_of(16, 100, 64);
  TruncationInputs in = inputs(turns, 1664, 64, 30, 20, 500);
  in.prefix_is_pack = true;
  const TruncationPlan plan = plan_truncation(in);
  ASSERT_TRUE(plan.needed);
  // 64 + 4 x 100 + 30 + 20 = 514 > 500; 64 + 3 x 100 + 50 = 414 fits.
  EXPECT_EQ(plan.tail_begin, 64 + 13 * 100);
  EXPECT_EQ(plan.dropped_tokens, 1300);
  EXPECT_EQ(plan.dropped_turns, 13u);
  EXPECT_THAT(plan.kept_turns, ElementsAre(SessionTurn{14, 64}, SessionTurn{15, 164}, SessionTurn{16, 264}));
  EXPECT_EQ(plan.description,
            "context overflow: dropped turns 1-13 (1300 tokens), kept the pack (64 tokens) and turns 14-16");
}

TEST(ContextOverflowTest, WhenNoTurnFitsAllAreDroppedButThePrefix) {
  const std::vector<SessionTurn> turns = turns_of(3, 100, 10);
  TruncationInputs in = inputs(turns, 310, 10, 200, 50, 300);
  const TruncationPlan plan = plan_truncation(in);
  ASSERT_TRUE(plan.needed);
  EXPECT_EQ(plan.tail_begin, 310);
  EXPECT_EQ(plan.dropped_tokens, 300);
  EXPECT_TRUE(plan.kept_turns.empty());
  EXPECT_EQ(plan.description, "context overflow: dropped turns 1-3 (300 tokens), kept the first 10 tokens");
}

TEST(ContextOverflowTest, ATurnThatStartsInsideTheKeptPrefixLosesOnlyItsRest) {
  // No pack; turn 1 = [0, 40) holds an 8-token system prompt kept by keep_tokens.
  const std::vector<SessionTurn> turns = {{1, 0}, {2, 40}, {3, 80}};
  const TruncationPlan plan = plan_truncation(inputs(turns, 120, 8, 30, 10, 100));
  ASSERT_TRUE(plan.needed);
  // From turn 2: 8 + 80 + 30 + 10 = 128 > 100; from turn 3: 8 + 40 + 40 = 88 fits.
  EXPECT_EQ(plan.tail_begin, 80);
  EXPECT_EQ(plan.dropped_tokens, 72);
  EXPECT_EQ(plan.dropped_turns, 2u);
  EXPECT_THAT(plan.kept_turns, ElementsAre(SessionTurn{3, 8}));
  EXPECT_EQ(plan.description, "context overflow: dropped turns 1-2 (72 tokens), kept the first 8 tokens and turn 3");
}

TEST(ContextOverflowTest, TurnsWhollyInsideThePrefixBecomePartOfIt) {
  const std::vector<SessionTurn> turns = {{1, 0}, {2, 10}, {3, 50}, {4, 90}};
  const TruncationPlan plan = plan_truncation(inputs(turns, 130, 10, 20, 10, 80));
  ASSERT_TRUE(plan.needed);
  EXPECT_EQ(plan.tail_begin, 90);
  EXPECT_EQ(plan.dropped_turns, 2u);  // turns 2 and 3; turn 1 is the kept prefix
  EXPECT_THAT(plan.kept_turns, ElementsAre(SessionTurn{4, 10}));
  EXPECT_EQ(plan.description, "context overflow: dropped turns 2-3 (80 tokens), kept the first 10 tokens and turn 4");
}

TEST(ContextOverflowTest, NothingPastThePrefixMeansNothingToDrop) {
  const std::vector<SessionTurn> none;
  EXPECT_FALSE(plan_truncation(inputs(none, 64, 64, 500, 10, 300)).needed);
}

TEST(ContextOverflowTest, ModesParseAndUnknownOnesAreNamed) {
  EXPECT_EQ(*parse_context_overflow("refuse"), ContextOverflowMode::kRefuse);
  EXPECT_EQ(*parse_context_overflow("truncate"), ContextOverflowMode::kTruncate);
  EXPECT_EQ(*parse_context_overflow("shift"), ContextOverflowMode::kShift);
  const absl::StatusOr<ContextOverflowMode> other = parse_context_overflow("rotate");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(std::string(other.status().message()), ::testing::HasSubstr("not one of refuse, truncate, shift"));
  EXPECT_EQ(*context_overflow_from_proto(v1::CONTEXT_OVERFLOW_UNSPECIFIED, ContextOverflowMode::kRefuse),
            ContextOverflowMode::kRefuse);
  EXPECT_EQ(*context_overflow_from_proto(v1::CONTEXT_OVERFLOW_TRUNCATE, ContextOverflowMode::kRefuse),
            ContextOverflowMode::kTruncate);
  EXPECT_EQ(*context_overflow_from_proto(v1::CONTEXT_OVERFLOW_SHIFT, ContextOverflowMode::kRefuse),
            ContextOverflowMode::kShift);
  EXPECT_EQ(context_overflow_from_proto(static_cast<v1::ContextOverflow>(4), ContextOverflowMode::kRefuse)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

class CopyKvPrefixTest : public testing::TinyModelTest,
                         public ::testing::WithParamInterface<const char*> {};

TEST_P(CopyKvPrefixTest, CopiesThePrefixBitForBit) {
  const absl::StatusOr<KvCodecConfig> codec = parse_kv_codec_config(GetParam());
  ASSERT_TRUE(codec.ok()) << codec.status();
  auto from = QuantizedKvCache::Create(geometry_, 64, *codec);
  ASSERT_TRUE(from.ok()) << from.status();
  const std::vector<int32_t> tokens = testing::seeded_prompt(testing::shared_tiny_model(), 40, 3);
  ASSERT_TRUE(engine_->prefill(tokens, **from, nullptr).ok());
  auto to = QuantizedKvCache::Create(geometry_, 48, (*from)->config());
  ASSERT_TRUE(to.ok()) << to.status();
  const absl::StatusOr<int64_t> copied = copy_kv_prefix(**from, 17, **to);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(*copied, 17);
  EXPECT_EQ((*to)->size(), 17);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      auto a = (*from)->export_block(layer, is_key, 0, 17);
      auto b = (*to)->export_block(layer, is_key, 0, 17);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->codes, b->codes) << "layer " << layer << (is_key ? " K" : " V");
      EXPECT_EQ(a->scales, b->scales);
      EXPECT_EQ(a->mins, b->mins);
    }
  }
  // Asking for more than the source holds copies what it holds.
  auto short_to = QuantizedKvCache::Create(geometry_, 48, (*from)->config());
  ASSERT_TRUE(short_to.ok());
  EXPECT_EQ(*copy_kv_prefix(**from, 45, **short_to), 40);
}

INSTANTIATE_TEST_SUITE_P(StoreCodecs, CopyKvPrefixTest, ::testing::Values("f16", "int8-g16", "int4-g16"),
                         [](const auto& test_param) {
                           std::string name = test_param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace baton
