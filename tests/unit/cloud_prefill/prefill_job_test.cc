// run_prefill_job (cloud_prefill/prefill_job.h) over a fake PrefillBackend
// whose KV is a known function of (layer, position, token): what is reused
// (pack, session cache, prefix cache, their state tier L2 filled by another
// replica) is copied, not computed, and streams the same KV as computing it;
// tenants and salts never share reuse;
// cancellation, backend and sink errors end the job with their codes and
// leave the caches as they were.
#include "cloud_prefill/prefill_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "tests/support/fake_redis_client.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr char kSession[] = "0123456789abcdef0123456789abcdef";

// The fake KV: K and V of (layer, position, token) in every channel.
float fake_k(int layer, int64_t pos, int32_t token, int64_t c) {
  return static_cast<float>(layer + 1) * 0.25f + static_cast<float>(pos % 13) * 0.125f +
         static_cast<float>(token % 7) * 0.0625f + static_cast<float>(c % 4) * 0.5f;
}
float fake_v(int layer, int64_t pos, int32_t token, int64_t c) { return -fake_k(layer, pos, token, c); }

// Fills rows [begin, begin + tokens.size()) of `kv` with the fake KV.
absl::Status store_fake(std::span<const int32_t> tokens, int64_t begin, F32KvCache& kv, int layer) {
  const int64_t dim = kv.geometry().kv_dim();
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<float> k(static_cast<size_t>(n * dim)), v(k.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      k[static_cast<size_t>(i * dim + c)] = fake_k(layer, begin + i, tokens[static_cast<size_t>(i)], c);
      v[static_cast<size_t>(i * dim + c)] = fake_v(layer, begin + i, tokens[static_cast<size_t>(i)], c);
    }
  }
  return kv.store(layer, begin, n, k.data(), v.data());
}

class FakeBackend final : public PrefillBackend {
 public:
  struct Chunk {
    int64_t begin = 0;
    int64_t count = 0;
  };

  std::string name() const override { return "fake"; }
  void begin_sequence() override { ++sequences; }
  absl::Status prefill(std::span<const int32_t> tokens, F32KvCache& kv, const LayerDoneFn& layer_done) override {
    const int64_t begin = kv.size();
    chunks.push_back({begin, static_cast<int64_t>(tokens.size())});
    if (chunks.size() == fail_on_chunk) return fail_with;
    for (int layer = 0; layer < kv.geometry().n_layer; ++layer) {
      BATON_RETURN_IF_ERROR(store_fake(tokens, begin, kv, layer));
      ++layers_done;
      BATON_RETURN_IF_ERROR(layer_done(layer));
    }
    kv.set_size(begin + static_cast<int64_t>(tokens.size()));
    return absl::OkStatus();
  }
  // Early tokens' steps: fake KV rows, and logits whose argmax is the last
  // token + 1 (mod kFakeVocab).
  static constexpr int kFakeVocab = 512;
  absl::Status decode(std::span<const int32_t> tokens, F32KvCache& kv, std::vector<float>* last_logits) override {
    const int64_t begin = kv.size();
    decode_positions.push_back(begin);
    if (decode_positions.size() == fail_on_decode) return absl::InternalError("decode step failed");
    for (int layer = 0; layer < kv.geometry().n_layer; ++layer) BATON_RETURN_IF_ERROR(store_fake(tokens, begin, kv, layer));
    kv.set_size(begin + static_cast<int64_t>(tokens.size()));
    last_logits->assign(kFakeVocab, 0.0f);
    (*last_logits)[static_cast<size_t>((tokens.back() + 1) % kFakeVocab)] = 1.0f;
    return absl::OkStatus();
  }

  std::vector<int64_t> decode_positions;  // kv.size() at each decode step
  size_t fail_on_decode = 0;              // 1-based; 0: never
  int sequences = 0;
  std::atomic<int> layers_done{0};
  std::vector<Chunk> chunks;
  size_t fail_on_chunk = 0;  // 1-based; 0: never
  absl::Status fail_with;
};

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + salt * 131 + 3) % 500);
  return t;
}

class PrefillJobTest : public ::testing::Test {
 protected:
  const testing::TinyModel& tiny_ = testing::shared_tiny_model(GgmlType::kF32);
  PrefixCache prefix_cache_{uint64_t{1} << 26, tiny_.geometry};
  SessionCache session_cache_{uint64_t{1} << 26};
  FakeBackend backend_;

  PrefillJobEnv env(bool caches = true) {
    PrefillJobEnv e;
    e.model = tiny_.model.get();
    e.fingerprint = &tiny_.fingerprint;
    if (caches) {
      e.prefix_cache = &prefix_cache_;
      e.session_cache = &session_cache_;
    }
    return e;
  }

  static PrefillJobInput input(std::vector<int32_t> tokens, const std::string& tenant = "alice") {
    PrefillJobInput in;
    in.tenant = tenant;
    in.tokens = std::move(tokens);
    in.chunk_tokens = 16;
    auto codec = parse_kv_codec_config("f16");
    EXPECT_TRUE(codec.ok());
    in.codec = *codec;
    in.admitted = std::chrono::steady_clock::now();
    return in;
  }

  struct Run {
    absl::StatusOr<PrefillJobResult> result;
    std::vector<v1::KvStreamMessage> messages;
  };
  Run run(const PrefillJobInput& in, bool caches = true, const std::function<bool()>& cancelled = {},
          const KvMessageSink& sink = {}) {
    Run r;
    KvMessageSink collect = [&](const v1::KvStreamMessage& m) -> absl::Status {
      if (sink) BATON_RETURN_IF_ERROR(sink(m));
      r.messages.push_back(m);
      return absl::OkStatus();
    };
    r.result = run_prefill_job(in, env(caches), backend_, collect, cancelled);
    return r;
  }

  // Reads `messages` as the edge would (pinned to our model, positions,
  // tokens, codec and prefix digest) into `target`, which already holds
  // [0, first) of the fake KV.
  void decode(const std::vector<v1::KvStreamMessage>& messages, const std::vector<int32_t>& tokens, uint32_t first,
              F32KvCache& target) {
    const std::span<const int32_t> all(tokens);
    for (int layer = 0; layer < tiny_.geometry.n_layer; ++layer) {
      ASSERT_TRUE(store_fake(all.first(first), 0, target, layer).ok());
    }
    target.set_size(first);
    KvStreamExpectation expected;
    expected.model = tiny_.fingerprint;
    expected.first_position = first;
    expected.token_ids = std::vector<int32_t>(tokens.begin() + first, tokens.end());
    expected.prefix_digest = prefix_digest(tokens);
    auto codec = kv_codec_params(input({}).codec);
    ASSERT_TRUE(codec.ok());
    expected.codec = *codec;
    auto load = read_kv_segment(messages, expected, &tiny_.rope, target);
    ASSERT_TRUE(load.ok()) << load.status();
    ASSERT_EQ(target.size(), static_cast<int64_t>(tokens.size()));
  }

  // `messages` decode to the fake KV everywhere.
  void expect_fake_kv(const std::vector<v1::KvStreamMessage>& messages, const std::vector<int32_t>& tokens,
                      uint32_t first) {
    F32KvCache target(tiny_.geometry, static_cast<int64_t>(tokens.size()));
    ASSERT_NO_FATAL_FAILURE(decode(messages, tokens, first, target));
    const int64_t dim = tiny_.geometry.kv_dim();
    for (int layer = 0; layer < tiny_.geometry.n_layer; ++layer) {
      for (int64_t pos = 0; pos < target.size(); ++pos) {
        for (int64_t c = 0; c < dim; ++c) {
          const int32_t token = tokens[static_cast<size_t>(pos)];
          ASSERT_NEAR(target.k_row(layer, pos)[c], fake_k(layer, pos, token, c), 1e-3) << layer << " " << pos;
          ASSERT_NEAR(target.v_row(layer, pos)[c], fake_v(layer, pos, token, c), 1e-3) << layer << " " << pos;
        }
      }
    }
  }
};

bool has_trailer(const std::vector<v1::KvStreamMessage>& messages) {
  return !messages.empty() && messages.back().has_trailer();
}

TEST_F(PrefillJobTest, ComputesEveryTokenInChunksAndStreamsAVerifiedSegment) {
  const std::vector<int32_t> tokens = prompt(100, 1);
  Run r = run(input(tokens), /*caches=*/false);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->reused_tokens, 0);
  EXPECT_EQ(r.result->computed_tokens, 100);
  EXPECT_EQ(backend_.sequences, 1);
  int64_t next = 0;
  for (const FakeBackend::Chunk& chunk : backend_.chunks) {
    EXPECT_EQ(chunk.begin, next) << "chunks are contiguous";
    EXPECT_LE(chunk.count, 16) << "at most chunk_tokens per chunk";
    next = chunk.begin + chunk.count;
  }
  EXPECT_EQ(next, 100);
  ASSERT_TRUE(has_trailer(r.messages));
  EXPECT_EQ(r.messages.back().trailer().producer().computed_tokens(), 100u);
  EXPECT_EQ(r.messages.back().trailer().producer().cached_tokens(), 0u);
  EXPECT_EQ(r.messages.back().trailer().producer().backend(), "fake");
  expect_fake_kv(r.messages, tokens, 0);
}

TEST_F(PrefillJobTest, APrefixCacheHitIsCopiedNotComputedAndStreamsTheSameKv) {
  const std::vector<int32_t> tokens = prompt(150, 2);
  Run first = run(input(tokens));
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  EXPECT_EQ(prefix_cache_.stats().inserted_tokens, 128u) << "the two full 64-token blocks";
  backend_.chunks.clear();

  Run second = run(input(tokens));
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  EXPECT_EQ(second.result->reused_tokens, 128);
  EXPECT_EQ(second.result->computed_tokens, 22);
  ASSERT_FALSE(backend_.chunks.empty());
  EXPECT_EQ(backend_.chunks.front().begin, 128) << "nothing cached is computed again";
  EXPECT_EQ(second.messages.back().trailer().producer().cached_tokens(), 128u);
  // Blocks may be cut differently (reused rows go out at once); the KV they carry may not differ.
  F32KvCache computed(tiny_.geometry, 150), reused(tiny_.geometry, 150);
  ASSERT_NO_FATAL_FAILURE(decode(first.messages, tokens, 0, computed));
  ASSERT_NO_FATAL_FAILURE(decode(second.messages, tokens, 0, reused));
  const size_t bytes = static_cast<size_t>(150 * tiny_.geometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < tiny_.geometry.n_layer; ++layer) {
    EXPECT_EQ(std::memcmp(computed.k_row(layer, 0), reused.k_row(layer, 0), bytes), 0) << "K of layer " << layer;
    EXPECT_EQ(std::memcmp(computed.v_row(layer, 0), reused.v_row(layer, 0), bytes), 0) << "V of layer " << layer;
  }
}

TEST_F(PrefillJobTest, TenantsAndSaltsNeverReuseEachOthersPrefixes) {
  const std::vector<int32_t> tokens = prompt(130, 3);
  ASSERT_TRUE(run(input(tokens, "alice")).result.ok());
  auto bob = run(input(tokens, "bob")).result;
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->reused_tokens, 0);
  PrefillJobInput salted = input(tokens, "alice");
  salted.cache_salt = "user-7";
  auto salted_run = run(salted).result;
  ASSERT_TRUE(salted_run.ok());
  EXPECT_EQ(salted_run->reused_tokens, 0);
  auto alice = run(input(tokens, "alice")).result;
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->reused_tokens, 128);
}

TEST_F(PrefillJobTest, ASessionsNextTurnReusesItsWholeHistoryAndStreamsOnlyTheDelta) {
  const std::vector<int32_t> turn2 = prompt(60, 4);
  PrefillJobInput first = input(std::vector<int32_t>(turn2.begin(), turn2.begin() + 40));
  first.session_id = kSession;
  ASSERT_TRUE(run(first).result.ok());
  EXPECT_EQ(session_cache_.stats().sessions, 1u);
  backend_.chunks.clear();

  PrefillJobInput next = input(turn2);
  next.session_id = kSession;
  next.first_position = 40;
  Run r = run(next);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->reused_tokens, 40) << "the whole history, not only whole 64-token blocks";
  ASSERT_FALSE(backend_.chunks.empty());
  EXPECT_EQ(backend_.chunks.front().begin, 40);
  ASSERT_TRUE(r.messages.front().has_header());
  EXPECT_EQ(r.messages.front().header().first_position(), 40u);
  expect_fake_kv(r.messages, turn2, 40);

  PrefillJobInput stranger = input(turn2, "bob");
  stranger.session_id = kSession;
  auto other = run(stranger).result;
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->reused_tokens, 0) << "another tenant's session of the same id";
}

TEST_F(PrefillJobTest, APackUnderneathIsReusedButItsKvNeverEntersThePrefixCache) {
  const std::vector<int32_t> tokens = prompt(100, 5);
  auto pack = std::make_shared<StoredPack>();
  pack->pack_id = "sys";
  pack->tokens.assign(tokens.begin(), tokens.begin() + 64);
  auto pack_kv = std::make_shared<F32KvCache>(tiny_.geometry, 64);
  for (int layer = 0; layer < tiny_.geometry.n_layer; ++layer) {
    ASSERT_TRUE(store_fake(pack->tokens, 0, *pack_kv, layer).ok());
  }
  pack_kv->set_size(64);
  pack->kv = pack_kv;
  PrefillJobInput in = input(tokens);
  in.pack = pack;
  in.session_id = kSession;
  Run r = run(in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->reused_tokens, 64);
  EXPECT_EQ(backend_.chunks.front().begin, 64);
  EXPECT_EQ(prefix_cache_.stats().entries, 0u) << "KV over a pack's decoded KV is not exact";
  F32KvCache kv(tiny_.geometry, 100);
  bool exact = true;
  EXPECT_EQ(session_cache_.load("alice", kSession, tokens, 100, kv, &exact), 100);
  EXPECT_FALSE(exact);
  expect_fake_kv(r.messages, tokens, 0);
}

TEST_F(PrefillJobTest, CancellationStopsAtTheNextLayerAndKeepsNothing) {
  const std::vector<int32_t> tokens = prompt(130, 6);
  PrefillJobInput in = input(tokens);
  in.session_id = kSession;
  Run r = run(in, /*caches=*/true, [&] { return backend_.layers_done.load() >= 1; });
  ASSERT_EQ(r.result.status().code(), absl::StatusCode::kCancelled) << r.result.status();
  EXPECT_EQ(backend_.chunks.size(), 1u) << "the first layer_done stops the compute";
  EXPECT_EQ(backend_.layers_done.load(), 1);
  EXPECT_FALSE(has_trailer(r.messages));
  EXPECT_EQ(prefix_cache_.stats().entries, 0u);
  EXPECT_EQ(session_cache_.stats().sessions, 0u);
}

TEST_F(PrefillJobTest, ABackendErrorKeepsItsCodeAndSaysThePrefillFailed) {
  backend_.fail_on_chunk = 2;
  backend_.fail_with = absl::ResourceExhaustedError("device out of memory");
  PrefillJobInput in = input(prompt(130, 7));
  in.session_id = kSession;
  Run r = run(in);
  ASSERT_EQ(r.result.status().code(), absl::StatusCode::kResourceExhausted) << r.result.status();
  EXPECT_EQ(r.result.status().message(), "prefill failed: device out of memory");
  EXPECT_FALSE(has_trailer(r.messages));
  EXPECT_EQ(prefix_cache_.stats().entries, 0u);
  EXPECT_EQ(session_cache_.stats().sessions, 0u);
}

TEST_F(PrefillJobTest, ASinkThatFailsEndsTheJobWithTheSinksStatus) {
  for (const bool at_header : {true, false}) {
    SCOPED_TRACE(at_header ? "at the header" : "at the first block");
    Run r = run(input(prompt(100, 8)), /*caches=*/true, {}, [&](const v1::KvStreamMessage& m) -> absl::Status {
      if (m.has_header() == at_header) return absl::UnavailableError("the client went away");
      return absl::OkStatus();
    });
    ASSERT_EQ(r.result.status().code(), absl::StatusCode::kUnavailable) << r.result.status();
    EXPECT_THAT(std::string(r.result.status().message()), HasSubstr("the client went away"));
    EXPECT_FALSE(has_trailer(r.messages));
    EXPECT_EQ(prefix_cache_.stats().entries, 0u);
  }
}

// Early tokens (PrefillRequest.early_tokens): sampled after the prompt from
// the backend's decode steps with the edge's sampler, sent through the
// urgent sink; the stream and the caches hold the prompt only.
class PrefillJobEarlyTest : public PrefillJobTest {
 protected:
  struct EarlyRun {
    absl::StatusOr<PrefillJobResult> result;
    std::vector<v1::KvStreamMessage> messages;  // the stream sink
    std::vector<v1::KvStreamMessage> urgent;    // the urgent sink
  };
  EarlyRun run_early(const PrefillJobInput& in) {
    EarlyRun r;
    std::mutex mu;
    r.result = run_prefill_job(
        in, env(), backend_,
        [&](const v1::KvStreamMessage& m) {
          std::lock_guard<std::mutex> lock(mu);
          r.messages.push_back(m);
          return absl::OkStatus();
        },
        {},
        [&](const v1::KvStreamMessage& m) {
          std::lock_guard<std::mutex> lock(mu);
          r.urgent.push_back(m);
          return absl::OkStatus();
        });
    return r;
  }
  static EarlySampling greedy(uint32_t count, int32_t last_token) {
    EarlySampling early;
    early.count = count;
    early.last_token = last_token;
    early.params.temperature = 0.0f;
    return early;
  }
};

TEST_F(PrefillJobEarlyTest, SampledAfterThePromptAndSentThroughTheUrgentSinkWhileTheStreamHoldsThePromptOnly) {
  const std::vector<int32_t> tokens = prompt(100, 9);
  PrefillJobInput in = input(tokens);
  in.session_id = kSession;
  in.early = greedy(5, 41);
  EarlyRun r = run_early(in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->early_tokens, 5u);
  // The fake logits' argmax is the last token + 1: 42, 43, ... from the prompt's last token 41.
  ASSERT_EQ(r.urgent.size(), 5u);
  for (size_t i = 0; i < r.urgent.size(); ++i) {
    ASSERT_TRUE(r.urgent[i].has_early_tokens());
    const v1::EarlyTokens& early = r.urgent[i].early_tokens();
    ASSERT_EQ(early.token_ids_size(), 1);
    EXPECT_EQ(early.token_ids(0), 42u + i);
    EXPECT_EQ(early.last(), i + 1 == r.urgent.size());
    EXPECT_TRUE(early.logprobs().empty());
    EXPECT_GT(early.cloud_ms(), 0.0);
  }
  // One decode step per token, right after the prompt: 41 at 100, then 42..45.
  EXPECT_EQ(backend_.decode_positions, (std::vector<int64_t>{100, 101, 102, 103, 104}));
  for (const v1::KvStreamMessage& m : r.messages) EXPECT_FALSE(m.has_early_tokens());
  ASSERT_TRUE(has_trailer(r.messages));
  EXPECT_EQ(r.messages.back().trailer().producer().computed_tokens(), 100u);
  expect_fake_kv(r.messages, tokens, 0);
  // The session cache holds the prompt, not the sampled rows.
  F32KvCache held(tiny_.geometry, 200);
  bool exact = false;
  std::vector<int32_t> longer = tokens;
  for (int32_t t = 41; t < 46; ++t) longer.push_back(t);
  EXPECT_EQ(session_cache_.load("alice", kSession, longer, static_cast<int64_t>(longer.size()), held, &exact), 100);
}

TEST_F(PrefillJobEarlyTest, LogprobsRideWithEachToken) {
  PrefillJobInput in = input(prompt(40, 10));
  in.early = greedy(2, 7);
  in.early->logprobs = 3;
  EarlyRun r = run_early(in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  ASSERT_EQ(r.urgent.size(), 2u);
  for (const v1::KvStreamMessage& m : r.urgent) {
    ASSERT_EQ(m.early_tokens().logprobs_size(), 1);
    const v1::TokenLogprob& lp = m.early_tokens().logprobs(0);
    EXPECT_EQ(lp.token_id(), m.early_tokens().token_ids(0));
    EXPECT_LT(lp.logprob(), 0.0f);
    ASSERT_EQ(lp.top_size(), 3);
    EXPECT_EQ(lp.top(0).token_id(), lp.token_id()) << "greedy: the most likely token";
  }
}

TEST_F(PrefillJobEarlyTest, AFailedDecodeStepEndsTheEarlyTokensNotTheStream) {
  const std::vector<int32_t> tokens = prompt(70, 11);
  PrefillJobInput in = input(tokens);
  in.early = greedy(6, 3);
  backend_.fail_on_decode = 3;
  EarlyRun r = run_early(in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->early_tokens, 2u);
  ASSERT_EQ(r.urgent.size(), 3u);
  EXPECT_EQ(r.urgent[0].early_tokens().token_ids(0), 4u);
  EXPECT_EQ(r.urgent[1].early_tokens().token_ids(0), 5u);
  EXPECT_FALSE(r.urgent[1].early_tokens().last());
  EXPECT_EQ(r.urgent[2].early_tokens().token_ids_size(), 0);
  EXPECT_TRUE(r.urgent[2].early_tokens().last()) << "the edge learns no more come";
  ASSERT_TRUE(has_trailer(r.messages));
  expect_fake_kv(r.messages, tokens, 0);
}

TEST_F(PrefillJobEarlyTest, SeededSamplingContinuesTheEdgesRandomStream) {
  // The cloud's sampler is the edge's at the turn's start: the same tokens
  // as sampling here from the same logits and state.
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_k = 0;
  params.seed = 99;
  Sampler edge(params);
  for (int32_t t : {5, 6, 7}) edge.accept(t);
  EarlySampling early;
  early.count = 4;
  early.last_token = 7;
  early.params = params;
  early.params.seed = 0;  // never used: the state replaces it
  early.state = edge.state();
  PrefillJobInput in = input(prompt(30, 12));
  in.early = early;
  EarlyRun r = run_early(in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  ASSERT_EQ(r.urgent.size(), 4u);
  int32_t last = 7;
  for (const v1::KvStreamMessage& m : r.urgent) {
    std::vector<float> logits(FakeBackend::kFakeVocab, 0.0f);
    logits[static_cast<size_t>((last + 1) % FakeBackend::kFakeVocab)] = 1.0f;
    const int32_t expected = edge.sample(logits);
    edge.accept(expected, /*generated=*/true);
    EXPECT_EQ(m.early_tokens().token_ids(0), static_cast<uint32_t>(expected));
    last = expected;
  }
}

// Two replicas' in-process caches over one state tier (a fake Redis): what
// one computed, the other reuses from L2 — the same KV, not computed again.
class PrefillJobStateTierTest : public PrefillJobTest {
 protected:
  struct Replica {
    Replica(const testing::TinyModel& tiny, std::shared_ptr<FakeRedisClient> redis)
        : prefix(uint64_t{1} << 26, tiny.geometry), session(uint64_t{1} << 26),
          tier(std::move(redis), tiny.fingerprint, tiny.geometry) {}
    PrefixCache prefix;
    SessionCache session;
    StateTier tier;
  };

  Run run_on(Replica& replica, const PrefillJobInput& in) {
    PrefillJobEnv e = env(/*caches=*/false);
    e.prefix_cache = &replica.prefix;
    e.session_cache = &replica.session;
    e.state_tier = &replica.tier;
    Run r;
    r.result = run_prefill_job(in, e, backend_, [&](const v1::KvStreamMessage& m) {
      r.messages.push_back(m);
      return absl::OkStatus();
    }, {});
    replica.tier.flush();
    return r;
  }

  std::shared_ptr<FakeRedisClient> redis_ = std::make_shared<FakeRedisClient>();
  Replica a_{tiny_, redis_};
  Replica b_{tiny_, redis_};
};

TEST_F(PrefillJobStateTierTest, BlocksComputedOnOneReplicaAreAnL2HitOnAnotherWithTheSameKv) {
  const std::vector<int32_t> tokens = prompt(150, 2);
  Run first = run_on(a_, input(tokens));
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  EXPECT_EQ(a_.tier.stats().prefix.writes, 2u) << "the two full blocks A computed";
  backend_.chunks.clear();
  Run second = run_on(b_, input(tokens));
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  EXPECT_EQ(second.result->reused_tokens, 128);
  ASSERT_FALSE(backend_.chunks.empty());
  EXPECT_EQ(backend_.chunks.front().begin, 128) << "nothing from L2 is computed again";
  EXPECT_EQ(b_.tier.stats().prefix.hits, 2u);
  EXPECT_EQ(b_.prefix.stats().inserted_tokens, 128u) << "the L2 blocks are in B's L1 now";
  EXPECT_EQ(b_.tier.stats().prefix.writes, 0u) << "B computed no full block";
  F32KvCache computed(tiny_.geometry, 150), reused(tiny_.geometry, 150);
  ASSERT_NO_FATAL_FAILURE(decode(first.messages, tokens, 0, computed));
  ASSERT_NO_FATAL_FAILURE(decode(second.messages, tokens, 0, reused));
  const size_t bytes = static_cast<size_t>(150 * tiny_.geometry.kv_dim()) * sizeof(float);
  for (int layer = 0; layer < tiny_.geometry.n_layer; ++layer) {
    EXPECT_EQ(std::memcmp(computed.k_row(layer, 0), reused.k_row(layer, 0), bytes), 0) << "K of layer " << layer;
    EXPECT_EQ(std::memcmp(computed.v_row(layer, 0), reused.v_row(layer, 0), bytes), 0) << "V of layer " << layer;
  }
}

TEST_F(PrefillJobStateTierTest, L2ContinuesBlockByBlockWhereL1Stops) {
  const std::vector<int32_t> tokens = prompt(200, 5);
  ASSERT_TRUE(run_on(a_, input(tokens)).result.ok());
  // B's L1 learns block 0 only (an L2 hit of a 70-token prompt).
  auto head = run_on(b_, input(std::vector<int32_t>(tokens.begin(), tokens.begin() + 70))).result;
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->reused_tokens, 64);
  auto whole = run_on(b_, input(tokens)).result;
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->reused_tokens, 192) << "block 0 from L1, blocks 1 and 2 from L2";
  EXPECT_EQ(b_.tier.stats().prefix.hits, 3u);
  EXPECT_EQ(b_.prefix.stats().hit_tokens, 64u) << "block 0, on the second run";
}

TEST_F(PrefillJobStateTierTest, ASessionMovesToAnotherReplicaOnlyForItsOwner) {
  const std::vector<int32_t> turn2 = prompt(60, 4);
  PrefillJobInput first = input(std::vector<int32_t>(turn2.begin(), turn2.begin() + 40));
  first.session_id = kSession;
  ASSERT_TRUE(run_on(a_, first).result.ok());
  // Someone with the id but another history, on B: nothing reused, nothing replaced.
  std::vector<int32_t> other = turn2;
  other[5] += 1;
  PrefillJobInput intruder = input(other);
  intruder.session_id = kSession;
  auto stolen = run_on(b_, intruder).result;
  ASSERT_TRUE(stolen.ok());
  EXPECT_EQ(stolen->reused_tokens, 0);
  // The owner's turn 2, on a third replica (B's L1 holds the intruder's entry).
  Replica c(tiny_, redis_);
  PrefillJobInput next = input(turn2);
  next.session_id = kSession;
  next.first_position = 40;
  backend_.chunks.clear();
  Run r = run_on(c, next);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->reused_tokens, 40) << "turn 1's whole history, from L2";
  EXPECT_EQ(backend_.chunks.front().begin, 40);
  expect_fake_kv(r.messages, turn2, 40);
  EXPECT_EQ(c.tier.stats().session.hits, 1u);
}

TEST_F(PrefillJobStateTierTest, ATierThatIsDownCostsOnlyMisses) {
  const std::vector<int32_t> tokens = prompt(150, 6);
  ASSERT_TRUE(run_on(a_, input(tokens)).result.ok());
  redis_->set_down(true);
  PrefillJobInput in = input(tokens);
  in.session_id = kSession;
  Run r = run_on(b_, in);
  ASSERT_TRUE(r.result.ok()) << r.result.status();
  EXPECT_EQ(r.result->reused_tokens, 0);
  expect_fake_kv(r.messages, tokens, 0);
  EXPECT_GE(b_.tier.stats().prefix.errors, 1u);
  redis_->set_down(false);
  auto again = run_on(PrefillJobStateTierTest::a_, input(prompt(150, 7))).result;
  ASSERT_TRUE(again.ok());
}

}  // namespace
}  // namespace baton
