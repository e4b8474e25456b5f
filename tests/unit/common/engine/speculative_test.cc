// Speculative decoding (common/engine/speculative.h): prompt-lookup drafts,
// the draft-length controller, and DecodeStepper against plain decode on the
// bundled model: greedy token-identical, seeded sampling sample-identical
// for every seed, the KV left exactly as plain decoding leaves it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/engine/draft_model.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/engine/speculative.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/model/model.h"
#include "common/model/model_quantize.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

TEST(PromptLookupDraft, ProposesWhatFollowedTheMostRecentEarlierOccurrence) {
  //                                 0  1  2  3  4  5  6  7  8  9 10
  const std::vector<int32_t> history = {5, 6, 7, 8, 9, 5, 6, 7, 1, 5, 6};
  // "5 6" occurs at 0 and 5: the most recent (5) is followed by 7 1 5 6.
  EXPECT_EQ(prompt_lookup_draft(history, 3), (std::vector<int32_t>{7, 1, 5}));
  // The draft stops at the end of the history.
  EXPECT_EQ(prompt_lookup_draft(history, 10), (std::vector<int32_t>{7, 1, 5, 6}));
  EXPECT_TRUE(prompt_lookup_draft(history, 0).empty());
}

TEST(PromptLookupDraft, PrefersTheLongestMatchingNgram) {
  // "3 4" last occurred at 6 (followed by 9), but "2 3 4" only at 0
  // (followed by 7): the longer context wins.
  const std::vector<int32_t> history = {2, 3, 4, 7, 0, 0, 3, 4, 9, 1, 2, 3, 4};
  EXPECT_EQ(prompt_lookup_draft(history, 1), (std::vector<int32_t>{7}));
  PromptLookupOptions bigrams;
  bigrams.max_ngram = 2;
  EXPECT_EQ(prompt_lookup_draft(history, 1, bigrams), (std::vector<int32_t>{9}));
}

TEST(PromptLookupDraft, EmptyWithoutAnEarlierOccurrenceOrBeyondTheSearchWindow) {
  EXPECT_TRUE(prompt_lookup_draft(std::vector<int32_t>{1, 2, 3, 4, 5}, 4).empty());
  std::vector<int32_t> history = {8, 9, 3};
  for (int i = 0; i < 100; ++i) history.push_back(100 + i);
  history.push_back(8);
  history.push_back(9);
  EXPECT_EQ(prompt_lookup_draft(history, 1), (std::vector<int32_t>{3}));
  PromptLookupOptions near;
  near.max_search = 50;
  EXPECT_TRUE(prompt_lookup_draft(history, 1, near).empty());
}

TEST(DraftController, DraftsLongWhenDraftsAreTakenAndStopsWhenTheyAreNot) {
  DraftController c(8);
  for (int i = 0; i < 30; ++i) c.record_verify(8, 8);
  EXPECT_GT(c.acceptance(), 0.9);
  EXPECT_EQ(c.choose(), 8);
  // Full drafts weigh 8 taken tokens each: forgetting them takes a while.
  for (int i = 0; i < 80; ++i) c.record_verify(4, 0);
  EXPECT_LT(c.acceptance(), 0.1);
  // Off, with one probe of one token every kProbeInterval steps.
  int probes = 0, drafted = 0;
  for (int i = 0; i < 4 * DraftController::kProbeInterval; ++i) {
    const int k = c.choose();
    probes += k == 1;
    drafted += k;
  }
  EXPECT_EQ(probes, 4);
  EXPECT_EQ(drafted, 4);
}

TEST(DraftController, ExpensiveRowsShortenTheDraft) {
  DraftController cheap(8), dear(8);
  for (DraftController* c : {&cheap, &dear}) {
    for (int i = 0; i < 30; ++i) c->record_verify(4, 2);  // a ~ 2/3
    for (int i = 0; i < 10; ++i) c->record_time(1, 0.010);
  }
  for (int i = 0; i < 30; ++i) {
    cheap.record_time(5, 0.011);  // a row costs 2.5% of a step
    dear.record_time(5, 0.030);   // 50%
  }
  EXPECT_NEAR(cheap.row_cost(), 0.025, 0.005);
  EXPECT_NEAR(dear.row_cost(), 0.5, 0.05);
  EXPECT_GT(cheap.choose(), dear.choose());
  EXPECT_EQ(dear.choose(), 1);  // (1 + a) / 1.5 = 1.11 beats (1 + a + a^2) / 2 = 1.05
}

TEST(DraftController, LearnsEachRowCountsCostAndDraftsWhereTheKernelStillPays) {
  // A kernel that takes 4 tokens per pass over the weights: up to 4 rows cost
  // 0.1 step each, the fifth starts a second, compute-bound pass (the 1B
  // shape measured 1.08 / 1.34 / 2.30 steps at 2 / 4 / 8 rows).
  const auto steps = [](int rows) { return rows <= 4 ? 1.0 + 0.1 * (rows - 1) : 2.3 + 0.1 * (rows - 5); };
  DraftController c(8);
  for (int i = 0; i < 30; ++i) c.record_verify(8, 4);  // a ~ 0.8
  ASSERT_NEAR(c.acceptance(), 0.8, 0.02);
  for (int i = 0; i < 10; ++i) c.record_time(1, 0.010);
  std::map<int, int> chosen;
  for (int i = 0; i < 300; ++i) {
    const int k = c.choose();
    ++chosen[k];
    c.record_time(k + 1, 0.010 * steps(k + 1));
  }
  // With every row count measured, 3 drafts (4 rows, E = 2.95 tokens for 1.3
  // steps) beat 8 (E = 4.33 for 2.7 steps), which one fitted slope (~0.2 per
  // row) would choose: 4.33 / 2.6 > 2.95 / 1.6.
  EXPECT_NEAR(c.pass_cost(4), 1.3, 0.02);
  // Tried once or twice, then left: judged dearer than the slope says.
  EXPECT_GT(c.pass_cost(9), 2.0);
  EXPECT_GT(c.pass_cost(9), 1.0 + 8 * c.row_cost());
  EXPECT_EQ(c.choose(), 3);
  EXPECT_GT(chosen[3], 250) << "tried others too often";
}

// The bundled model (Q4_0 copy) and held-out text that repeats: a passage,
// then the passage's first lines again, which the reply can quote.
class DecodeStepperTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string f16 = testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf";
    static const std::string path = testing::make_temp_dir("speculative") + "/kjv-q4_0.gguf";
    ASSERT_TRUE(quantize_model(f16, path, QuantizeOptions{GgmlType::kQ4_0, 2}).ok());
    auto model = Model::Load(path);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    auto tokenizer = Tokenizer::FromGguf(model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    std::ifstream in(testing::source_dir() + "/deploy/models/baton-tiny-kjv.heldout.txt");
    std::stringstream text;
    text << in.rdbuf();
    heldout_ = new std::string(text.str());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    delete heldout_;
  }

  // Lines [first, first + lines) of held-out text, then the first of them
  // cut after `words` words: the reply can go on quoting.
  std::vector<int32_t> quote_prompt(size_t first, size_t lines, size_t words) const {
    std::vector<std::string> all;
    std::stringstream in(*heldout_);
    for (std::string line; std::getline(in, line);) all.push_back(line);
    std::string passage, head;
    for (size_t i = first; i < first + lines && i < all.size(); ++i) passage += all[i] + "\n";
    std::stringstream first_line(all[first]);
    for (size_t i = 0; i < words; ++i) {
      std::string word;
      first_line >> word;
      head += (i ? " " : "") + word;
    }
    return tokenizer_->encode(passage + head);
  }

  std::unique_ptr<QuantizedKvCache> new_store(int64_t capacity) const {
    auto wire = parse_kv_codec_config("int8-g32");
    EXPECT_TRUE(wire.ok());
    Engine probe(*model_, EngineOptions{1, 16});
    auto cache = QuantizedKvCache::Create(probe.kv_geometry(), capacity, QuantizedKvCache::store_config_for(*wire));
    EXPECT_TRUE(cache.ok());
    return std::move(*cache);
  }

  struct Decoded {
    std::vector<int32_t> tokens;
    std::vector<float> next_logits;  // a decode step after the reply (the KV's state)
    int64_t kv_size = 0;
    DecodeStepperStats stats;
  };

  // `count` tokens after `prompt`, plain (max_draft < 0) or through a
  // DecodeStepper drafting up to max_draft.
  // adaptive false: every step drafts what lookup finds (the most rollbacks).
  // drafter: drafts from it instead of prompt lookup.
  Decoded decode(const std::vector<int32_t>& prompt, int count, const SamplingParams& params, int max_draft,
                 bool adaptive = false, Drafter* drafter = nullptr) const {
    Engine engine(*model_, EngineOptions{2, 16});
    auto kv = new_store(static_cast<int64_t>(prompt.size()) + count + 8);
    Sampler sampler(params);
    for (int32_t t : prompt) sampler.accept(t);
    std::vector<float> last;
    EXPECT_TRUE(engine.prefill(std::span(prompt).first(prompt.size() - 1), *kv, &last).ok());
    Decoded out;
    std::vector<int32_t> history = prompt;
    if (max_draft < 0) {
      std::vector<float> logits;
      EXPECT_TRUE(engine.decode_step(prompt.back(), *kv, &logits).ok());
      for (int i = 0; i < count; ++i) {
        const int32_t t = sampler.sample(logits);
        sampler.accept(t, true);
        out.tokens.push_back(t);
        if (i + 1 < count) {
          EXPECT_TRUE(engine.decode_step(t, *kv, &logits).ok());
        }
      }
    } else {
      DecodeStepper stepper(engine, *kv, max_draft, PromptLookupOptions{}, adaptive);
      stepper.set_drafter(drafter);
      EXPECT_TRUE(stepper.start(std::span(prompt).last(1), history).ok());
      for (int i = 0; i < count; ++i) {
        const int32_t t = sampler.sample(stepper.logits());
        sampler.accept(t, true);
        out.tokens.push_back(t);
        history.push_back(t);
        if (i + 1 == count) {
          stepper.finish();
          break;
        }
        EXPECT_TRUE(stepper.advance(t, history, count - i - 1).ok());
      }
      out.stats = stepper.stats();
    }
    out.kv_size = kv->size();
    EXPECT_TRUE(engine.decode_step(out.tokens.back(), *kv, &out.next_logits).ok());
    return out;
  }

  // The same reply, and the KV in the same state: the next step's logits
  // are the same bits.
  static void expect_same_reply_and_kv(const Decoded& got, const Decoded& want) {
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.kv_size, want.kv_size);
    ASSERT_EQ(got.next_logits.size(), want.next_logits.size());
    EXPECT_EQ(std::memcmp(got.next_logits.data(), want.next_logits.data(), want.next_logits.size() * sizeof(float)),
              0);
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static std::string* heldout_;
};

Model* DecodeStepperTest::model_ = nullptr;
Tokenizer* DecodeStepperTest::tokenizer_ = nullptr;
std::string* DecodeStepperTest::heldout_ = nullptr;

TEST_F(DecodeStepperTest, GreedyOutputIsTokenIdenticalToPlainDecodeAndDraftsAreTaken) {
  const std::vector<int32_t> prompt = quote_prompt(0, 6, 6);
  const Decoded plain = decode(prompt, 64, SamplingParams{}, -1);
  const Decoded spec = decode(prompt, 64, SamplingParams{}, 8);
  expect_same_reply_and_kv(spec, plain);
  // Speculation really ran: drafts were verified and some were taken.
  EXPECT_GT(spec.stats.verifies, 0u);
  EXPECT_GT(spec.stats.accepted_tokens, 0u);
  std::printf("[ figures  ] greedy quote: %llu verifies, %llu plain steps, %llu/%llu draft tokens taken\n",
              static_cast<unsigned long long>(spec.stats.verifies),
              static_cast<unsigned long long>(spec.stats.plain_steps),
              static_cast<unsigned long long>(spec.stats.accepted_tokens),
              static_cast<unsigned long long>(spec.stats.drafted_tokens));
}

TEST_F(DecodeStepperTest, SeededSamplingIsSampleIdenticalForEverySeed) {
  // The same seed draws the same tokens with and without speculation, so the
  // output distribution over seeds is the same too (a stronger check than a
  // statistical test). Temperature 1 over top-k 8: rejections happen.
  const std::vector<int32_t> prompt = quote_prompt(10, 4, 5);
  uint64_t accepted = 0, drafted = 0;
  int differing_replies = 0;
  std::vector<int32_t> first_reply;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 8;
    params.seed = seed;
    const Decoded plain = decode(prompt, 24, params, -1);
    const Decoded spec = decode(prompt, 24, params, 6);
    EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
    EXPECT_EQ(spec.kv_size, plain.kv_size) << "seed " << seed;
    accepted += spec.stats.accepted_tokens;
    drafted += spec.stats.drafted_tokens;
    if (seed == 1) first_reply = plain.tokens;
    differing_replies += plain.tokens != first_reply;
  }
  EXPECT_GT(differing_replies, 0);  // the seeds really sample
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, drafted);  // and some drafts were rejected
}

TEST_F(DecodeStepperTest, AdaptiveDraftsAreIdenticalToo) {
  // The controller's choices (timing-dependent) change only the speed.
  const std::vector<int32_t> prompt = quote_prompt(0, 6, 6);
  const Decoded plain = decode(prompt, 48, SamplingParams{}, -1);
  const Decoded adaptive = decode(prompt, 48, SamplingParams{}, 8, /*adaptive=*/true);
  EXPECT_EQ(adaptive.tokens, plain.tokens);
  EXPECT_EQ(adaptive.kv_size, plain.kv_size);
}

// A draft model: the bundled model's F16 source drafting for its Q4_0 copy
// (the same tokenizer; close, not equal, logits).
TEST_F(DecodeStepperTest, ADraftModelKeepsTheReplyAndIsTakenWherePromptLookupHasNothing) {
  auto draft_model = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(draft_model.ok()) << draft_model.status();
  ASSERT_TRUE(check_draft_model(*model_, **draft_model).ok());
  Engine draft_engine(**draft_model, EngineOptions{1, 16});
  // Free text: two lines, then whatever the model writes (little to look up).
  std::vector<int32_t> prompt = tokenizer_->encode("And the LORD said unto Moses,\n");
  const Decoded plain = decode(prompt, 48, SamplingParams{}, -1);
  const Decoded lookup = decode(prompt, 48, SamplingParams{}, 4);
  ModelDrafter drafter(draft_engine, 256);
  const Decoded drafted = decode(prompt, 48, SamplingParams{}, 4, /*adaptive=*/false, &drafter);
  expect_same_reply_and_kv(drafted, plain);
  // Every step drafted 4 (the controller is off): by lookup where it found
  // something, else by the draft model; mostly taken, more than by lookup
  // alone.
  EXPECT_GT(drafted.stats.drafted_tokens, 0u);
  EXPECT_GT(drafted.stats.accepted_tokens * 10, drafted.stats.drafted_tokens * 7)
      << drafted.stats.accepted_tokens << "/" << drafted.stats.drafted_tokens;
  EXPECT_GT(drafted.stats.accepted_tokens, lookup.stats.accepted_tokens);
  // The drafter's KV holds a prefix of the conversation plus at most the
  // draft it made last (its rollback kept it in step with the history).
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), plain.tokens.begin(), plain.tokens.end());
  const std::vector<int32_t>& cached = drafter.cached();
  const size_t shared = static_cast<size_t>(
      std::mismatch(cached.begin(), cached.end(), history.begin(), history.end()).first - cached.begin());
  EXPECT_GE(shared + 4, cached.size());
  EXPECT_GT(shared, prompt.size());
  std::printf("[ figures  ] free text, 48 tokens, drafts of 4: lookup then draft model %llu/%llu taken, prompt lookup alone %llu/%llu\n",
              static_cast<unsigned long long>(drafted.stats.accepted_tokens),
              static_cast<unsigned long long>(drafted.stats.drafted_tokens),
              static_cast<unsigned long long>(lookup.stats.accepted_tokens),
              static_cast<unsigned long long>(lookup.stats.drafted_tokens));
}

TEST_F(DecodeStepperTest, SeededSamplingWithADraftModelIsSampleIdentical) {
  auto draft_model = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(draft_model.ok()) << draft_model.status();
  Engine draft_engine(**draft_model, EngineOptions{1, 16});
  const std::vector<int32_t> prompt = quote_prompt(10, 4, 5);
  uint64_t accepted = 0, drafted = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 8;
    params.seed = seed;
    ModelDrafter drafter(draft_engine, 512);
    const Decoded plain = decode(prompt, 24, params, -1);
    const Decoded spec = decode(prompt, 24, params, 5, /*adaptive=*/false, &drafter);
    EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
    EXPECT_EQ(spec.kv_size, plain.kv_size) << "seed " << seed;
    accepted += spec.stats.accepted_tokens;
    drafted += spec.stats.drafted_tokens;
  }
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, drafted);  // sampling rejects some greedy drafts
}

TEST_F(DecodeStepperTest, ADraftModelDraftsNothingPastItsCapacity) {
  auto draft_model = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(draft_model.ok()) << draft_model.status();
  Engine draft_engine(**draft_model, EngineOptions{1, 16});
  ModelDrafter drafter(draft_engine, 16);
  std::vector<int32_t> history(14, 5);
  auto two = drafter.draft(history, 8);  // 14 history rows + 2 draft rows fill 16: 3 tokens
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size(), 3u);
  history.resize(17, 5);
  auto none = drafter.draft(history, 8);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(DraftModel, AModelWithAnotherTokenizerIsRefusedByName) {
  auto target = Model::Load(testing::source_dir() + "/deploy/models/baton-tiny-kjv-f16.gguf");
  ASSERT_TRUE(target.ok()) << target.status();
  auto other = Model::Load(testing::synth_model_path("tiny", GgmlType::kF16));
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::Status status = check_draft_model(**target, **other);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("tokenizer"), std::string::npos) << status;
  EXPECT_TRUE(check_draft_model(**target, **target).ok());
}

TEST_F(DecodeStepperTest, ZeroDraftIsPlainDecode) {
  const std::vector<int32_t> prompt = quote_prompt(20, 3, 4);
  const Decoded plain = decode(prompt, 20, SamplingParams{}, -1);
  const Decoded zero = decode(prompt, 20, SamplingParams{}, 0);
  EXPECT_EQ(zero.tokens, plain.tokens);
  EXPECT_EQ(zero.stats.verifies, 0u);
  EXPECT_EQ(zero.stats.plain_steps, 20u);  // the last prompt token, then 19 sampled ones
}

TEST_F(DecodeStepperTest, FinishInsideAFullyTakenDraftRollsItsRowsBack) {
  // A reply that ends on every length from 1 to 12 leaves the KV exactly
  // where plain decoding leaves it, whichever draft row it ended on.
  const std::vector<int32_t> prompt = quote_prompt(0, 6, 6);
  for (int count = 1; count <= 12; ++count) {
    const Decoded plain = decode(prompt, count, SamplingParams{}, -1);
    const Decoded spec = decode(prompt, count, SamplingParams{}, 8);
    SCOPED_TRACE(count);
    expect_same_reply_and_kv(spec, plain);
  }
}

}  // namespace
}  // namespace baton
