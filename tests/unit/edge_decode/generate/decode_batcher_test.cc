// DecodeBatcher (edge_decode/generate/decode_batcher.h) on a real Engine and
// a synthetic model: turns decoding at once share steps and each gets exactly
// the logits it would get alone; a prefill is cut into chunks that alternate
// with the decode steps; a caller that leaves, or a request that fails,
// leaves the others untouched and its own cache at its size before.
#include "edge_decode/generate/decode_batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/model/model.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using Logits = std::vector<float>;

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return tokens;
}

int32_t argmax(const Logits& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

bool bits_equal(const Logits& a, const Logits& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class DecodeBatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::Load(testing::synth_model_path("tiny", GgmlType::kQ4_0));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    // A micro-batch of 16 tokens: prefill chunks of 16 are whole micro-batches.
    engine_ = std::make_unique<Engine>(*model_, EngineOptions{2, 16});
  }

  int n_vocab() const { return model_->spec().n_vocab; }

  // The edge's store: INT4 codes.
  std::unique_ptr<KvCache> new_cache(int64_t capacity) {
    const KvCodecConfig config = QuantizedKvCache::store_config_for(
        default_kv_codec_config(KvCodecConfig::Bits::kInt4, engine_->kv_geometry()));
    auto cache = QuantizedKvCache::Create(engine_->kv_geometry(), capacity, config);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }

  // The logits a sequence sees alone, straight on the engine: after its
  // prompt, then after each of `steps` greedy decode steps (steps + 1 rows).
  std::vector<Logits> alone(const std::vector<int32_t>& prompt, int steps) {
    std::unique_ptr<KvCache> kv = new_cache(static_cast<int64_t>(prompt.size()) + steps + 1);
    std::vector<Logits> trace(1);
    EXPECT_TRUE(engine_->prefill(prompt, *kv, &trace[0]).ok());
    for (int i = 0; i < steps; ++i) {
      Logits next;
      EXPECT_TRUE(engine_->decode_step(argmax(trace.back()), *kv, &next).ok());
      trace.push_back(std::move(next));
    }
    return trace;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
};

// What one batched turn saw: its logits trace and the largest step it shared.
struct TurnTrace {
  std::vector<Logits> logits;
  int max_shared = 0;
  absl::Status status;
};

// A turn through the batcher: prefill, then `steps` greedy decode steps as a
// seated turn. With a barrier, each turn takes its seat once every turn has
// prefilled, and decodes once every turn holds its seat (a seated turn that
// does not ask would hold the others' chunks up to the straggler wait).
struct SeatBarrier {
  std::atomic<int> prefilled{0};
  std::atomic<int> seated{0};
  int turns = 0;
};
TurnTrace batched_turn(DecodeBatcher& batcher, KvCache& kv, const std::vector<int32_t>& prompt, int steps,
                       SeatBarrier* barrier = nullptr) {
  TurnTrace t;
  t.logits.resize(1);
  t.status = batcher.prefill(prompt, kv, &t.logits[0]);
  if (!t.status.ok()) return t;
  if (barrier != nullptr) {
    ++barrier->prefilled;
    while (barrier->prefilled.load() < barrier->turns) std::this_thread::yield();
  }
  DecodeBatcher::Seat seat = batcher.seat();
  if (barrier != nullptr) {
    ++barrier->seated;
    while (barrier->seated.load() < barrier->turns) std::this_thread::yield();
  }
  for (int i = 0; i < steps; ++i) {
    const int32_t token = argmax(t.logits.back());
    Logits next;
    DecodeStepInfo info;
    t.status = seat.decode(std::span<const int32_t>(&token, 1), kv, &next, {}, &info);
    if (!t.status.ok()) return t;
    t.max_shared = std::max(t.max_shared, info.requests);
    t.logits.push_back(std::move(next));
  }
  return t;
}

TEST_F(DecodeBatcherTest, ConcurrentTurnsShareStepsAndGetTheLogitsTheyWouldGetAlone) {
  constexpr int kSteps = 12;
  const std::vector<int> lengths = {5, 17, 33, 40};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<Logits>> expected;
  for (size_t i = 0; i < lengths.size(); ++i) {
    prompts.push_back(random_tokens(lengths[i], n_vocab(), 100 + i));
    expected.push_back(alone(prompts.back(), kSteps));
  }
  // Every step waits for all seated turns, and all four are seated before
  // the first step: each step serves all four.
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const auto& p : prompts) caches.push_back(new_cache(static_cast<int64_t>(p.size()) + kSteps + 1));
  std::vector<TurnTrace> traces(prompts.size());
  SeatBarrier barrier;
  barrier.turns = static_cast<int>(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { traces[i] = batched_turn(batcher, *caches[i], prompts[i], kSteps, &barrier); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(traces[i].status.ok()) << traces[i].status;
    ASSERT_EQ(traces[i].logits.size(), expected[i].size());
    for (size_t step = 0; step < expected[i].size(); ++step) {
      EXPECT_TRUE(bits_equal(traces[i].logits[step], expected[i][step])) << "turn " << i << " step " << step;
    }
    EXPECT_EQ(caches[i]->size(), lengths[i] + kSteps);
  }
  const DecodeBatcherStats stats = batcher.stats();
  EXPECT_EQ(stats.decode_requests, prompts.size() * kSteps);
  EXPECT_EQ(stats.decode_steps, static_cast<uint64_t>(kSteps)) << "a step did not serve all four turns";
  EXPECT_EQ(stats.steps_by_requests[4], static_cast<uint64_t>(kSteps));
  for (const TurnTrace& t : traces) EXPECT_EQ(t.max_shared, 4);
}

TEST_F(DecodeBatcherTest, TurnsThatJoinDuringAStepShareTheNextStepsInsteadOfAlternating) {
  // Two turns decode; two more join while the first step runs (the
  // observer holds each decode step for kStepHold, as a large model's step
  // would last). When it ends, the newcomers have waited longer than the
  // straggler wait, but the turns that step served cannot have asked yet:
  // the next step must wait for them (from the step's end) and serve all
  // four. Measured from the newcomers' arrival, the pairs alternate for
  // good, each step serving two (what `baton bench load` showed).
  constexpr int kSteps = 8;
  constexpr auto kStepHold = std::chrono::milliseconds(60);
  // A turn's own work between its steps (sampling, streaming the token):
  // the turns a step served ask again this long after it, while the others
  // are waiting already.
  constexpr auto kThink = std::chrono::milliseconds(3);
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::milliseconds(20);
  options.max_straggler_wait = std::chrono::milliseconds(20);
  DecodeBatcher batcher(*engine_, options);
  std::atomic<bool> first_step_running{false};
  std::vector<int> step_sizes;  // the leader's thread only (steps run one at a time)
  batcher.set_step_observer([&](const DecodeBatcher::Step& step) {
    if (step.kind != DecodeBatcher::Step::Kind::kDecode) return;
    step_sizes.push_back(step.requests);
    first_step_running = true;
    std::this_thread::sleep_for(kStepHold);  // the engine stays busy meanwhile
  });
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int i = 0; i < 4; ++i) caches.push_back(new_cache(kSteps + 1));
  std::vector<absl::Status> statuses(4);
  auto turn = [&](int i) {
    DecodeBatcher::Seat seat = batcher.seat();
    int32_t token = static_cast<int32_t>(7 * i + 1);
    for (int step = 0; step < kSteps; ++step) {
      Logits next;
      statuses[static_cast<size_t>(i)] = seat.decode(std::span<const int32_t>(&token, 1), *caches[static_cast<size_t>(i)], &next);
      if (!statuses[static_cast<size_t>(i)].ok()) return;
      token = argmax(next);
      std::this_thread::sleep_for(kThink);
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(turn, 0);
  threads.emplace_back(turn, 1);
  while (!first_step_running.load()) std::this_thread::yield();
  threads.emplace_back(turn, 2);
  threads.emplace_back(turn, 3);
  for (auto& t : threads) t.join();
  for (const absl::Status& status : statuses) ASSERT_TRUE(status.ok()) << status;
  // Ideally: the first pair's first step, 7 steps of four, the second
  // pair's last step. A turn the machine delays past the 20 ms wait costs a
  // step of four; alternation would leave none.
  const int of_four = static_cast<int>(std::count(step_sizes.begin(), step_sizes.end(), 4));
  std::string sizes;
  for (int n : step_sizes) sizes += std::to_string(n) + " ";
  EXPECT_GE(of_four, 5) << "requests per decode step: " << sizes;
  EXPECT_LE(step_sizes.size(), 12u) << "requests per decode step: " << sizes;
}

TEST_F(DecodeBatcherTest, ALoneTurnDoesNotWaitForCompany) {
  // A straggler wait far longer than the test: a lone seated turn must never pay it.
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  const std::vector<int32_t> prompt = random_tokens(9, n_vocab(), 7);
  std::unique_ptr<KvCache> kv = new_cache(64);
  const auto start = std::chrono::steady_clock::now();
  TurnTrace t = batched_turn(batcher, *kv, prompt, 8);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(t.max_shared, 1);
}

TEST_F(DecodeBatcherTest, APrefillIsChunkedAndAlternatesWithDecodeSteps) {
  // The seated turn is always waited for, so the order is exact.
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 10};  // rounded up to 16
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  EXPECT_EQ(batcher.options().prefill_chunk_tokens, 16);
  std::mutex mu;
  std::vector<DecodeBatcher::Step> steps;
  std::atomic<int> decode_steps{0};
  batcher.set_step_observer([&](const DecodeBatcher::Step& step) {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(step);
    if (step.kind == DecodeBatcher::Step::Kind::kDecode) ++decode_steps;
  });

  // The running turn decodes until the long prompt is in (at most kMaxSteps).
  constexpr int kMaxSteps = 1500;
  const std::vector<int32_t> running_prompt = random_tokens(6, n_vocab(), 11);
  const std::vector<int32_t> long_prompt = random_tokens(64, n_vocab(), 12);  // 4 chunks
  std::unique_ptr<KvCache> reference = new_cache(64);
  Logits long_expected;
  ASSERT_TRUE(engine_->prefill(long_prompt, *reference, &long_expected).ok());

  std::unique_ptr<KvCache> running_kv = new_cache(6 + kMaxSteps + 1);
  std::atomic<bool> long_done{false};
  TurnTrace running;
  std::thread decoder([&] {
    running.logits.resize(1);
    running.status = batcher.prefill(running_prompt, *running_kv, &running.logits[0]);
    DecodeBatcher::Seat seat = batcher.seat();
    for (int i = 0; i < kMaxSteps && running.status.ok() && !long_done.load(); ++i) {
      const int32_t token = argmax(running.logits.back());
      Logits next;
      running.status = seat.decode(std::span<const int32_t>(&token, 1), *running_kv, &next);
      if (running.status.ok()) running.logits.push_back(std::move(next));
    }
  });
  while (decode_steps.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::unique_ptr<KvCache> long_kv = new_cache(64);
  Logits long_logits;
  ASSERT_TRUE(batcher.prefill(long_prompt, *long_kv, &long_logits).ok());
  long_done = true;
  decoder.join();

  ASSERT_TRUE(running.status.ok()) << running.status;
  ASSERT_LT(running.logits.size(), static_cast<size_t>(kMaxSteps) + 1) << "the prefill outlasted the running turn";
  const std::vector<Logits> running_expected = alone(running_prompt, static_cast<int>(running.logits.size()) - 1);
  for (size_t i = 0; i < running_expected.size(); ++i) {
    EXPECT_TRUE(bits_equal(running.logits[i], running_expected[i])) << "step " << i;
  }
  EXPECT_TRUE(bits_equal(long_logits, long_expected)) << "a chunked prefill differs from one prefill call";
  EXPECT_EQ(long_kv->size(), 64);
  // The long prompt's four chunks, each followed by a decode step of the
  // running turn (it decodes throughout).
  std::vector<size_t> chunk_at;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != DecodeBatcher::Step::Kind::kPrefillChunk || steps[i].caches[0] != long_kv.get()) continue;
    chunk_at.push_back(i);
    EXPECT_EQ(steps[i].rows, 16);
  }
  ASSERT_EQ(chunk_at.size(), 4u);
  for (size_t c = 0; c + 1 < chunk_at.size(); ++c) {
    ASSERT_LT(chunk_at[c] + 1, steps.size());
    EXPECT_EQ(steps[chunk_at[c] + 1].kind, DecodeBatcher::Step::Kind::kDecode)
        << "two chunks ran back to back while a turn was decoding";
  }
  EXPECT_EQ(batcher.stats().prefill_chunks, 4u + 1u);  // and the running turn's 6-token prompt
}

TEST_F(DecodeBatcherTest, ACallerThatLeavesMidPrefillIsTakenOutAndTheOthersGoOn) {
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  std::unique_ptr<KvCache> long_kv = new_cache(200);
  std::atomic<int> long_chunks{0};
  std::atomic<int> decode_steps{0};
  batcher.set_step_observer([&](const DecodeBatcher::Step& step) {
    if (step.kind == DecodeBatcher::Step::Kind::kDecode) ++decode_steps;
    if (step.kind == DecodeBatcher::Step::Kind::kPrefillChunk && step.caches[0] == long_kv.get()) ++long_chunks;
  });
  constexpr int kSteps = 30;
  const std::vector<int32_t> running_prompt = random_tokens(8, n_vocab(), 21);
  const std::vector<Logits> running_expected = alone(running_prompt, kSteps);
  // The long prompt's session already holds 5 tokens (straight on the
  // engine: the batcher serves nobody yet).
  const std::vector<int32_t> held = random_tokens(5, n_vocab(), 22);
  ASSERT_TRUE(engine_->prefill(held, *long_kv, nullptr).ok());
  std::unique_ptr<KvCache> running_kv = new_cache(8 + kSteps + 1);
  TurnTrace running;
  std::thread decoder([&] { running = batched_turn(batcher, *running_kv, running_prompt, kSteps); });
  while (decode_steps.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // The long prompt's caller leaves after its second chunk (the client went away).
  const std::vector<int32_t> long_prompt = random_tokens(160, n_vocab(), 23);  // 10 chunks
  DecodeBatcher::AliveCheck alive = [&]() -> absl::Status {
    if (long_chunks.load() >= 2) return absl::CancelledError("the client left");
    return absl::OkStatus();
  };
  Logits long_logits;
  const absl::Status status = batcher.prefill(long_prompt, *long_kv, &long_logits, alive);
  decoder.join();

  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(long_chunks.load(), 2);
  EXPECT_EQ(long_kv->size(), 5) << "the cache must be back at its size before the prefill";
  ASSERT_TRUE(running.status.ok()) << running.status;
  for (size_t i = 0; i < running_expected.size(); ++i) {
    EXPECT_TRUE(bits_equal(running.logits[i], running_expected[i])) << "step " << i;
  }
  EXPECT_EQ(batcher.stats().removed, 1u);
}

TEST_F(DecodeBatcherTest, AFailingRequestInASharedStepFailsAloneAndACancelledOneIsSkipped) {
  // Every step waits for all seated turns: the three turns share their steps.
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  constexpr int kSteps = 10;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<Logits>> expected;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(random_tokens(7 + 3 * i, n_vocab(), 30 + static_cast<uint64_t>(i)));
    expected.push_back(alone(prompts.back(), kSteps));
  }
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int i = 0; i < 4; ++i) caches.push_back(new_cache(static_cast<int64_t>(prompts[i].size()) + kSteps + 1));
  // Turn 2's cache has room for its prompt and 3 decode steps only: its
  // fourth step fails (RESOURCE_EXHAUSTED) inside a shared step.
  caches[2] = new_cache(static_cast<int64_t>(prompts[2].size()) + 3);
  std::vector<TurnTrace> traces(4);
  // Turn 3 is cancelled before its fifth step: that request never runs.
  std::atomic<bool> turn3_gone{false};
  std::vector<std::thread> threads;
  DecodeBatcher::Seat seats[4] = {batcher.seat(), batcher.seat(), batcher.seat(), batcher.seat()};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      TurnTrace& t = traces[static_cast<size_t>(i)];
      KvCache& kv = *caches[static_cast<size_t>(i)];
      t.logits.resize(1);
      t.status = seats[i].prefill(prompts[static_cast<size_t>(i)], kv, &t.logits[0]);
      DecodeBatcher::AliveCheck alive = [&, i]() -> absl::Status {
        return i == 3 && turn3_gone.load() ? absl::CancelledError("the client left") : absl::OkStatus();
      };
      for (int s = 0; s < kSteps && t.status.ok(); ++s) {
        if (i == 3 && s == 4) turn3_gone = true;
        const int32_t token = argmax(t.logits.back());
        Logits next;
        t.status = seats[i].decode(std::span<const int32_t>(&token, 1), kv, &next, alive);
        if (t.status.ok()) t.logits.push_back(std::move(next));
      }
      seats[i].leave();
    });
  }
  for (auto& t : threads) t.join();

  for (int i : {0, 1}) {
    ASSERT_TRUE(traces[i].status.ok()) << traces[i].status;
    for (size_t s = 0; s < expected[i].size(); ++s) {
      EXPECT_TRUE(bits_equal(traces[i].logits[s], expected[i][s])) << "turn " << i << " step " << s;
    }
  }
  EXPECT_TRUE(absl::IsResourceExhausted(traces[2].status)) << traces[2].status;
  EXPECT_EQ(traces[2].logits.size(), 4u);  // after the prompt and 3 steps
  EXPECT_EQ(caches[2]->size(), static_cast<int64_t>(prompts[2].size()) + 3);
  EXPECT_TRUE(absl::IsCancelled(traces[3].status)) << traces[3].status;
  EXPECT_EQ(caches[3]->size(), static_cast<int64_t>(prompts[3].size()) + 4) << "the cancelled step ran";
  const DecodeBatcherStats stats = batcher.stats();
  EXPECT_GE(stats.retried_steps, 1u) << "turn 2's failure was not in a shared step";
  EXPECT_EQ(stats.removed, 1u);
}

TEST_F(DecodeBatcherTest, AnExclusiveStepUsesTheEngineAloneBetweenTheOthersDecodeSteps) {
  // A turn whose engine work is its own (a speculative decoder's passes)
  // runs it as exclusive steps; a batched turn decodes meanwhile.
  DecodeBatcherOptions options{.max_batch = 4, .prefill_chunk_tokens = 16};
  options.min_straggler_wait = std::chrono::seconds(5);
  options.max_straggler_wait = std::chrono::seconds(5);
  DecodeBatcher batcher(*engine_, options);
  std::mutex mu;
  std::vector<DecodeBatcher::Step> steps;
  batcher.set_step_observer([&](const DecodeBatcher::Step& step) {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(step);
  });
  constexpr int kSteps = 12;
  const std::vector<int32_t> a_prompt = random_tokens(9, n_vocab(), 41);
  const std::vector<int32_t> b_prompt = random_tokens(13, n_vocab(), 42);
  const std::vector<Logits> a_expected = alone(a_prompt, kSteps);
  const std::vector<Logits> b_expected = alone(b_prompt, kSteps);
  std::unique_ptr<KvCache> a_kv = new_cache(9 + kSteps + 1);
  std::unique_ptr<KvCache> b_kv = new_cache(13 + kSteps + 1);
  SeatBarrier barrier;
  barrier.turns = 2;
  TurnTrace a;
  std::thread batched([&] { a = batched_turn(batcher, *a_kv, a_prompt, kSteps, &barrier); });
  // Turn b: its prefill and decode steps straight on the engine, inside exclusive steps.
  std::vector<Logits> b_trace(1);
  ++barrier.prefilled;
  while (barrier.prefilled.load() < barrier.turns) std::this_thread::yield();
  DecodeBatcher::Seat seat = batcher.seat();
  ++barrier.seated;
  // Both seated before b's first step, as batched_turn waits too: else b's
  // steps could all run while a has prefilled but not yet taken its seat
  // (nothing to wait for), the "back to back" this test rules out.
  while (barrier.seated.load() < barrier.turns) std::this_thread::yield();
  ASSERT_TRUE(seat.exclusive([&](Engine& engine) { return engine.prefill(b_prompt, *b_kv, &b_trace[0]); }).ok());
  for (int i = 0; i < kSteps; ++i) {
    Logits next;
    const int32_t token = argmax(b_trace.back());
    ASSERT_TRUE(seat.exclusive([&](Engine& engine) { return engine.decode_step(token, *b_kv, &next); }).ok());
    b_trace.push_back(std::move(next));
  }
  seat.leave();
  batched.join();

  ASSERT_TRUE(a.status.ok()) << a.status;
  for (size_t i = 0; i < a_expected.size(); ++i) EXPECT_TRUE(bits_equal(a.logits[i], a_expected[i])) << "a " << i;
  for (size_t i = 0; i < b_expected.size(); ++i) EXPECT_TRUE(bits_equal(b_trace[i], b_expected[i])) << "b " << i;
  // b's 13 exclusive steps (no cache: its own work), each followed by one of
  // a's decode steps while a still decodes.
  size_t last_decode = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind == DecodeBatcher::Step::Kind::kDecode) last_decode = i;
  }
  int exclusive_steps = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != DecodeBatcher::Step::Kind::kPrefillChunk || steps[i].caches[0] != nullptr) continue;
    ++exclusive_steps;
    if (i < last_decode && steps[i + 1].kind == DecodeBatcher::Step::Kind::kPrefillChunk) {
      EXPECT_NE(steps[i + 1].caches[0], nullptr) << "two exclusive steps ran back to back at step " << i;
    }
  }
  EXPECT_EQ(exclusive_steps, kSteps + 1);
}

}  // namespace
}  // namespace baton
