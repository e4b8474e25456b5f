// The KV handoff end to end on the tiny synthetic model: the "cloud" prefills
// tokens [0, n-1) into an F32 cache and writes the segment through the stream
// writer; the "edge" reads it into a fresh store, runs the last prompt token
// itself (the n-1 rule) and decodes 16 greedy tokens. F16 on the wire gives
// the tokens of a local-only run; quantized codecs stay within stated logit
// tolerances. Every rejected stream leaves the edge cache as it was.
#include "common/kv_stream/kv_handoff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/sampler.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kPromptTokens = 41;   // n: the cloud sends [0, 40), the edge runs token 40
constexpr int kDecodeTokens = 16;
constexpr int kCapacity = 64;
// Small blocks so every layer's K and V span several of them (tiny: 64 F16
// bytes per token and kind).
constexpr uint64_t kBlockPayloadBytes = 600;

KvCodecConfig parse(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return *c;
}

struct EdgeRun {
  std::vector<std::vector<float>> logits;  // [1 + kDecodeTokens][n_vocab]: last prompt token, then each step
  std::vector<int32_t> tokens;             // greedy tokens
};

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Max |a - b| over all logits of two runs, relative to the largest |b|.
double relative_max_diff(const EdgeRun& a, const EdgeRun& b) {
  double worst = 0, scale = 1e-6;
  for (size_t r = 0; r < a.logits.size(); ++r) {
    for (size_t i = 0; i < a.logits[r].size(); ++i) {
      worst = std::max(worst, std::fabs(double{a.logits[r][i]} - b.logits[r][i]));
      scale = std::max(scale, std::fabs(double{b.logits[r][i]}));
    }
  }
  return worst / scale;
}

class KvHandoff : public testing::TinyModelTest {
 protected:
  KvHandoff() : TinyModelTest(/*engine_threads=*/2) {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TinyModelTest::SetUp());
    Rng rng(7);
    prompt_.resize(kPromptTokens);
    for (auto& t : prompt_) t = static_cast<int32_t>(rng.next() % model_->spec().n_vocab);
  }

  std::vector<int32_t> prompt_prefix(int end) const { return {prompt_.begin(), prompt_.begin() + end}; }

  // The cloud: prefills [0, n-1) and streams [first, n-1) with `codec`.
  std::vector<v1::KvStreamMessage> cloud_stream(const KvCodecConfig& codec, int first = 0) {
    const std::vector<int32_t> prefix = prompt_prefix(kPromptTokens - 1);
    F32KvCache cloud(geometry_, kCapacity);
    EXPECT_TRUE(engine_->prefill(prefix, cloud, nullptr).ok());
    KvStreamHeaderInfo info;
    info.model = fingerprint_;
    info.codec = codec;
    info.first_position = static_cast<uint32_t>(first);
    info.token_ids.assign(prefix.begin() + first, prefix.end());
    info.prefix_digest = prefix_digest(prefix);
    std::vector<v1::KvStreamMessage> messages;
    KvStreamWriter writer(
        [&](const v1::KvStreamMessage& m) {
          messages.push_back(m);
          return absl::OkStatus();
        },
        KvStreamWriterOptions{kBlockPayloadBytes});
    const absl::Status st = write_kv_segment(cloud, info, &rope_, writer);
    EXPECT_TRUE(st.ok()) << st;
    return messages;
  }

  KvStreamExpectation expectation(int first = 0) const {
    const std::vector<int32_t> prefix = prompt_prefix(kPromptTokens - 1);
    KvStreamExpectation e;
    e.model = fingerprint_;
    e.first_position = static_cast<uint32_t>(first);
    e.token_ids = std::vector<int32_t>(prefix.begin() + first, prefix.end());
    e.prefix_digest = prefix_digest(prefix);
    return e;
  }

  // The edge after the handoff: the last prompt token, then greedy decode
  // (inputs follow `forced` when given, so two runs see the same inputs).
  EdgeRun edge_run(KvCache& kv, const std::vector<int32_t>* forced = nullptr) {
    EdgeRun run;
    std::vector<float> logits;
    EXPECT_TRUE(engine_->prefill(std::vector<int32_t>{prompt_.back()}, kv, &logits).ok());
    run.logits.push_back(logits);
    for (int i = 0; i < kDecodeTokens; ++i) {
      const int32_t next = forced ? (*forced)[static_cast<size_t>(i)] : argmax(logits);
      run.tokens.push_back(next);
      EXPECT_TRUE(engine_->decode_step(next, kv, &logits).ok());
      run.logits.push_back(logits);
    }
    return run;
  }

  // Local-only: the whole prompt prefilled on the edge with F32 KV.
  EdgeRun local_run() {
    F32KvCache local(geometry_, kCapacity);
    EXPECT_TRUE(engine_->prefill(prompt_prefix(kPromptTokens - 1), local, nullptr).ok());
    return edge_run(local);
  }

  std::unique_ptr<QuantizedKvCache> edge_store(const KvCodecConfig& wire) const {
    auto store = QuantizedKvCache::Create(geometry_, kCapacity, QuantizedKvCache::store_config_for(wire));
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }

  std::vector<int32_t> prompt_;
};

// ------------------------------------------------------- round trips ------

struct HandoffCase {
  std::string wire;
  double tolerance;       // relative max logit difference to the local F32 run
  bool same_tokens;       // greedy tokens must equal the local run's
  bool f32_target = false;  // the edge cache is an F32KvCache instead of a store
};

void PrintTo(const HandoffCase& c, std::ostream* os) {
  *os << c.wire << (c.f32_target ? " -> f32" : " -> store") << " (tolerance " << c.tolerance << ")";
}

class KvHandoffRoundTrip : public KvHandoff, public ::testing::WithParamInterface<HandoffCase> {};

TEST_P(KvHandoffRoundTrip, EdgeDecodesLikeALocalRunWithinTheCodecTolerance) {
  const HandoffCase& c = GetParam();
  const KvCodecConfig wire = parse(c.wire);
  const std::vector<v1::KvStreamMessage> messages = cloud_stream(wire);
  ASSERT_GT(messages.size(), 2u + 4u * geometry_.n_layer);  // several blocks per layer and kind

  std::unique_ptr<KvCache> edge;
  if (c.f32_target) {
    edge = std::make_unique<F32KvCache>(geometry_, kCapacity);
  } else {
    edge = edge_store(wire);
  }
  auto load = read_kv_segment(messages, expectation(), &rope_, *edge);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(edge->size(), kPromptTokens - 1);
  EXPECT_EQ(load->first_position, 0u);
  EXPECT_EQ(load->token_count, static_cast<uint32_t>(kPromptTokens - 1));
  EXPECT_EQ(load->codec, wire);
  EXPECT_GT(load->encoded_bytes, 0u);
  const uint32_t blocks = static_cast<uint32_t>(messages.size() - 2);
  EXPECT_EQ(load->ingested_blocks + load->decoded_blocks, blocks);
  if (!c.f32_target) {
    auto* store = static_cast<QuantizedKvCache*>(edge.get());
    const bool all_ingested = store->can_ingest(wire, true) && store->can_ingest(wire, false);
    EXPECT_EQ(load->decoded_blocks == 0, all_ingested) << c.wire;
  }

  const EdgeRun reference = local_run();
  const EdgeRun got = edge_run(*edge, c.same_tokens ? nullptr : &reference.tokens);
  const double diff = relative_max_diff(got, reference);
  std::printf("  %s%s: relative max logit diff to the local run %.2e\n", c.wire.c_str(),
              c.f32_target ? " -> f32" : "", diff);
  EXPECT_LE(diff, c.tolerance) << c.wire;
  if (c.same_tokens) {
    EXPECT_EQ(got.tokens, reference.tokens) << c.wire;
  }
  EXPECT_EQ(edge->size(), kPromptTokens + kDecodeTokens);
}

std::string case_name(const ::testing::TestParamInfo<HandoffCase>& info) {
  std::string name = info.param.wire + (info.param.f32_target ? "_to_f32" : "");
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

// Tolerances as in quantized_kv_cache_test (same model and group size 16):
// f16 rounding of K/V gives ~1e-3 on logits, INT8 a few 1e-3, INT4 steps of
// range/15 up to ~0.25. Pre-RoPE keys add the f32 rounding of one RoPE
// round trip, far below those: f16-pre keeps the F16 tolerance and tokens.
INSTANTIATE_TEST_SUITE_P(
    Codecs, KvHandoffRoundTrip,
    ::testing::Values(HandoffCase{"f16", 2e-3, true}, HandoffCase{"f16-z3", 2e-3, true},
                      HandoffCase{"f16-had-z1", 2e-3, true},
                      HandoffCase{"f16-pre-z3", 2e-3, true}, HandoffCase{"f16-z3", 2e-3, true, true},
                      HandoffCase{"int8-g16-z3", 2e-2, false}, HandoffCase{"int8-pc-g16-z3", 2e-2, false},
                      HandoffCase{"int8-g16-pre-z3", 2e-2, false}, HandoffCase{"int8-g16-z3", 2e-2, false, true},
                      HandoffCase{"int4-g16-z3", 0.25, false}, HandoffCase{"int4-g16-had-z3", 0.25, false},
                      HandoffCase{"int4-pc-g16-z3", 0.25, false}, HandoffCase{"int4-pc-g16-pre-z3", 0.25, false}),
    case_name);

TEST_F(KvHandoff, IngestedBlocksEqualStoringTheCloudRowsLocally) {
  for (const char* name : {"f16-z3", "int8-g16-z3", "int4-g16-had-z3"}) {
    const KvCodecConfig wire = parse(name);
    auto edge = edge_store(wire);
    auto load = read_kv_segment(cloud_stream(wire), expectation(), &rope_, *edge);
    ASSERT_TRUE(load.ok()) << load.status();
    EXPECT_EQ(load->decoded_blocks, 0u) << name;
    // The same F32 rows stored directly into the same store.
    const int n = kPromptTokens - 1;
    F32KvCache cloud(geometry_, kCapacity);
    ASSERT_TRUE(engine_->prefill(prompt_prefix(n), cloud, nullptr).ok());
    auto direct = edge_store(wire);
    std::vector<float> k(static_cast<size_t>(n * geometry_.kv_dim())), v(k.size());
    const KvRowsFn rows = f32_kv_rows(cloud);
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      ASSERT_TRUE(rows(layer, true, 0, n, k.data()).ok());
      ASSERT_TRUE(rows(layer, false, 0, n, v.data()).ok());
      ASSERT_TRUE(direct->store(layer, 0, n, k.data(), v.data()).ok());
      for (bool is_key : {true, false}) {
        auto a = edge->export_block(layer, is_key, 0, n);
        auto b = direct->export_block(layer, is_key, 0, n);
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_EQ(a->codes, b->codes) << name << " layer " << layer;
        EXPECT_EQ(a->scales, b->scales) << name << " layer " << layer;
        EXPECT_EQ(a->mins, b->mins) << name << " layer " << layer;
      }
    }
  }
}

TEST_F(KvHandoff, SegmentAfterLocalTokensContinuesTheEdgeCache) {
  // The edge holds [0, 8) from its own prefill; the cloud sends [8, n-1).
  const KvCodecConfig wire = parse("int8-g16-z3");
  auto edge = edge_store(wire);
  ASSERT_TRUE(engine_->prefill(prompt_prefix(8), *edge, nullptr).ok());
  auto load = read_kv_segment(cloud_stream(wire, 8), expectation(8), &rope_, *edge);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->first_position, 8u);
  EXPECT_EQ(edge->size(), kPromptTokens - 1);
  const EdgeRun reference = local_run();
  const EdgeRun got = edge_run(*edge, &reference.tokens);
  EXPECT_LE(relative_max_diff(got, reference), 2e-2);
}

TEST_F(KvHandoff, BeforeLoadLetsTheEdgeReachTheSegmentWhileTheStreamIsRead) {
  // An overlapped prefill: the stream of [8, n-1) is read while the edge
  // still holds [0, 0); before_load brings it to 8, then the segment loads.
  const KvCodecConfig wire = parse("int8-g16-z3");
  auto edge = edge_store(wire);
  KvReadOptions options;
  int calls = 0;
  options.before_load = [&]() -> absl::Status {
    ++calls;
    return engine_->prefill(prompt_prefix(8), *edge, nullptr);
  };
  auto load = read_kv_segment(cloud_stream(wire, 8), expectation(8), &rope_, *edge, options);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(edge->size(), kPromptTokens - 1);

  // A refusal from before_load ends the read with it; the cache is as the hook left it.
  auto refused_edge = edge_store(wire);
  options.before_load = [] { return absl::AbortedError("the edge's prefill failed"); };
  auto refused = read_kv_segment(cloud_stream(wire, 8), expectation(8), &rope_, *refused_edge, options);
  EXPECT_TRUE(absl::IsAborted(refused.status())) << refused.status();
  EXPECT_EQ(refused_edge->size(), 0);
  // A hook that leaves the cache short of the segment: refused at load, unchanged.
  options.before_load = [] { return absl::OkStatus(); };
  auto short_of = read_kv_segment(cloud_stream(wire, 8), expectation(8), &rope_, *refused_edge, options);
  EXPECT_EQ(short_of.status().code(), absl::StatusCode::kFailedPrecondition) << short_of.status();
  EXPECT_EQ(refused_edge->size(), 0);
  // A corrupt stream never reaches the hook.
  std::vector<v1::KvStreamMessage> corrupt = cloud_stream(wire, 8);
  for (v1::KvStreamMessage& message : corrupt) {
    if (message.has_block()) {
      (*message.mutable_block()->mutable_payload())[0] ^= 0x5a;
      break;
    }
  }
  calls = 0;
  options.before_load = [&] {
    ++calls;
    return absl::OkStatus();
  };
  EXPECT_FALSE(read_kv_segment(corrupt, expectation(8), &rope_, *refused_edge, options).ok());
  EXPECT_EQ(calls, 0);
}

// ------------------------------------------------------------ rejects -----

// Everything the edge cache holds, including positions past its size.
struct CacheSnapshot {
  int64_t size = 0;
  std::vector<QuantizedKvBlock> blocks;  // per (layer, kind), all capacity
};

CacheSnapshot snapshot(const QuantizedKvCache& cache) {
  CacheSnapshot s;
  s.size = cache.size();
  for (int layer = 0; layer < cache.geometry().n_layer; ++layer) {
    for (bool is_key : {true, false}) {
      auto block = cache.export_block(layer, is_key, 0, cache.capacity());
      EXPECT_TRUE(block.ok()) << block.status();
      s.blocks.push_back(std::move(*block));
    }
  }
  return s;
}

void expect_same(const CacheSnapshot& a, const CacheSnapshot& b) {
  EXPECT_EQ(a.size, b.size);
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    EXPECT_EQ(a.blocks[i].codes, b.blocks[i].codes) << "plane " << i;
    EXPECT_EQ(a.blocks[i].scales, b.blocks[i].scales) << "plane " << i;
    EXPECT_EQ(a.blocks[i].mins, b.blocks[i].mins) << "plane " << i;
  }
}

// Rewrites block checksums and the trailer digest so the stream is
// consistent again after its payloads were changed.
void reseal(std::vector<v1::KvStreamMessage>& messages) {
  KvStreamDigest digest;
  for (v1::KvStreamMessage& m : messages) {
    if (m.has_block()) {
      m.mutable_block()->set_encoded_size(m.block().payload().size());
      m.mutable_block()->set_checksum(kv_payload_checksum(m.block().payload()));
      digest.add_block(m.block());
    } else if (m.has_trailer()) {
      m.mutable_trailer()->set_stream_digest(digest.value());
    }
  }
}

class KvHandoffReject : public KvHandoff {
 protected:
  // The edge holds [0, 8) already; the stream is [8, n-1).
  void SetUp() override {
    KvHandoff::SetUp();
    wire_ = parse("int8-g16");  // uncompressed: payload bytes are the planes
    edge_ = edge_store(wire_);
    ASSERT_TRUE(engine_->prefill(prompt_prefix(8), *edge_, nullptr).ok());
    before_ = snapshot(*edge_);
    messages_ = cloud_stream(wire_, 8);
  }

  absl::Status read(const std::vector<v1::KvStreamMessage>& messages, const KvStreamExpectation& expected,
                    bool trial_decode = true) {
    KvReadOptions options;
    options.trial_decode = trial_decode;
    return read_kv_segment(messages, expected, &rope_, *edge_, options).status();
  }

  void expect_untouched() { expect_same(snapshot(*edge_), before_); }

  KvCodecConfig wire_;
  std::unique_ptr<QuantizedKvCache> edge_;
  CacheSnapshot before_;
  std::vector<v1::KvStreamMessage> messages_;
};

TEST_F(KvHandoffReject, GoodStreamIsAccepted) {
  ASSERT_TRUE(read(messages_, expectation(8)).ok());
  EXPECT_EQ(edge_->size(), kPromptTokens - 1);
}

TEST_F(KvHandoffReject, CorruptedPayloadLeavesTheCacheUntouched) {
  std::vector<v1::KvStreamMessage> bad = messages_;
  (*bad[3].mutable_block()->mutable_payload())[5] ^= 0x40;
  const absl::Status st = read(bad, expectation(8));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("checksum"));
  expect_untouched();
}

TEST_F(KvHandoffReject, WrongModelFingerprintLeavesTheCacheUntouched) {
  auto other = Model::Load(testing::synth_model_path("tiny", GgmlType::kF16, /*seed=*/2));
  ASSERT_TRUE(other.ok());
  KvStreamExpectation expected = expectation(8);
  expected.model = *model_fingerprint(**other);
  const absl::Status st = read(messages_, expected);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("model fingerprint mismatch"));
  expect_untouched();
}

TEST_F(KvHandoffReject, WrongPrefixLeavesTheCacheUntouched) {
  KvStreamExpectation expected = expectation(8);
  std::vector<int32_t> other = prompt_prefix(kPromptTokens - 1);
  other[3] = (other[3] + 1) % model_->spec().n_vocab;  // a different conversation, same segment ids
  expected.prefix_digest = prefix_digest(other);
  const absl::Status st = read(messages_, expected);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("prefix_digest"));
  expect_untouched();
}

TEST_F(KvHandoffReject, StreamWithoutTrailerLeavesTheCacheUntouched) {
  std::vector<v1::KvStreamMessage> cut(messages_.begin(), messages_.end() - 1);
  const absl::Status st = read(cut, expectation(8));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  expect_untouched();
}

TEST_F(KvHandoffReject, MissingBlockLeavesTheCacheUntouched) {
  std::vector<v1::KvStreamMessage> gap = messages_;
  gap.erase(gap.begin() + 2);
  reseal(gap);
  gap.back().mutable_trailer()->set_block_count(gap.back().trailer().block_count() - 1);
  const absl::Status st = read(gap, expectation(8));
  EXPECT_FALSE(st.ok());
  expect_untouched();
}

TEST_F(KvHandoffReject, ConsistentStreamWithBadScalesLeavesTheCacheUntouched) {
  // A sender that checksums garbage: the last payload byte of a V block is
  // the high byte of its last f16 scale; 0x7c makes it inf or NaN.
  std::vector<v1::KvStreamMessage> bad = messages_;
  v1::KvStreamMessage* victim = nullptr;
  for (auto& m : bad) {
    if (m.has_block() && m.block().kind() == v1::KV_KIND_V && m.block().layer() == 1) victim = &m;
  }
  ASSERT_NE(victim, nullptr);
  victim->mutable_block()->mutable_payload()->back() = static_cast<char>(0x7c);
  reseal(bad);
  // Caught while streaming (trial decode) ...
  absl::Status st = read(bad, expectation(8), /*trial_decode=*/true);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  expect_untouched();
  // ... or after the trailer, before anything is written.
  st = read(bad, expectation(8), /*trial_decode=*/false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("layer 1 V"));
  expect_untouched();
}

TEST_F(KvHandoffReject, SegmentThatDoesNotStartAtTheCacheSizeIsRefused) {
  // A stream from 0 while the edge holds 8 tokens.
  const std::vector<v1::KvStreamMessage> from_zero = cloud_stream(wire_, 0);
  KvStreamExpectation expected = expectation(0);
  absl::Status st = read(from_zero, expected);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  expected.first_position.reset();  // then the cache size pins it
  st = read(from_zero, expected);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  expect_untouched();
}

TEST_F(KvHandoffReject, SegmentLargerThanTheCacheIsRefused) {
  auto small = QuantizedKvCache::Create(geometry_, 16, QuantizedKvCache::store_config_for(wire_));
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(engine_->prefill(prompt_prefix(8), **small, nullptr).ok());
  auto load = read_kv_segment(messages_, expectation(8), &rope_, **small);
  EXPECT_EQ(load.status().code(), absl::StatusCode::kResourceExhausted) << load.status();
  EXPECT_EQ((*small)->size(), 8);
}

TEST_F(KvHandoff, SenderRejectsWhatTheStreamCannotCarry) {
  F32KvCache cloud(geometry_, kCapacity);
  ASSERT_TRUE(engine_->prefill(prompt_prefix(8), cloud, nullptr).ok());
  KvStreamHeaderInfo info;
  info.model = fingerprint_;
  info.token_ids = prompt_prefix(8);
  info.prefix_digest = prefix_digest(info.token_ids);
  KvStreamWriter writer([](const v1::KvStreamMessage&) { return absl::OkStatus(); });

  info.codec = parse("int4-g16-rows-z3");
  absl::Status st = write_kv_segment(cloud, info, &rope_, writer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("rows layout"));

  info.codec = parse("int4-g16-pre-z3");
  st = write_kv_segment(cloud, info, /*rope=*/nullptr, writer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("RoPE"));

  info.codec = parse("int4-g32-z3");  // head_dim 16
  st = write_kv_segment(cloud, info, &rope_, writer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);

  info.codec = parse("int8-g16");
  info.token_ids = prompt_prefix(20);  // more than the cloud holds
  st = write_kv_segment(cloud, info, &rope_, writer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("holds [0, 8)"));
}

}  // namespace
}  // namespace baton
