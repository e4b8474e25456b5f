// The transform codec through the real handoff on the tiny synthetic model:
// the cloud writes a segment coded with a calibration of the model's own KV,
// the edge reads it into its INT8 store (blocks decoded, keys rotated,
// requantized) or into an F32 cache (decoded in phase 2), and every check of
// the handoff still holds: a receiver without the calibration, or with
// another one, refuses the stream and its cache stays as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu/ops.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/prefix_digest.h"
#include "tests/support/tiny_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kCalibrationTokens = 96;
constexpr int kPromptTokens = 61;  // the cloud sends [0, 60)
constexpr int kCapacity = 128;

class KvHandoffTransform : public testing::TinyModelTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TinyModelTest::SetUp());
    const testing::TinyModel& shared = testing::shared_tiny_model();
    prompt_ = testing::seeded_prompt(shared, kPromptTokens, 3);
    calibration_ = calibrate(testing::seeded_prompt(shared, kCalibrationTokens, 4));
  }

  // A calibration of the model's KV over `tokens` (keys un-rotated).
  std::shared_ptr<const KvCalibration> calibrate(const std::vector<int32_t>& tokens) {
    F32KvCache cache(geometry_, static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(engine_->prefill(tokens, cache, nullptr).ok());
    KvCalibrationBuilder builder(geometry_, fingerprint_.digest);
    const int64_t n = cache.size(), kv_dim = geometry_.kv_dim();
    std::vector<float> unrotate(rope_.inv_freq.begin(), rope_.inv_freq.begin() + rope_.n_rot / 2);
    for (float& f : unrotate) f = -f;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      for (const bool is_key : {true, false}) {
        std::vector<float> rows(static_cast<size_t>(n * kv_dim));
        for (int64_t t = 0; t < n; ++t) {
          const float* row = is_key ? cache.k_row(layer, t) : cache.v_row(layer, t);
          std::copy(row, row + kv_dim, rows.begin() + t * kv_dim);
        }
        if (is_key) rope_rows(rows.data(), n, geometry_.n_head_kv, geometry_.head_dim, rope_.n_rot, rope_.neox, 0, unrotate.data());
        EXPECT_TRUE(builder.add(layer, is_key, rows.data(), n).ok());
      }
    }
    absl::StatusOr<KvCalibration> c = builder.finish("test");
    EXPECT_TRUE(c.ok()) << c.status();
    return std::make_shared<const KvCalibration>(std::move(*c));
  }

  std::unique_ptr<KvTransformCodec> coder(const std::string& name, std::shared_ptr<const KvCalibration> cal) {
    absl::StatusOr<std::unique_ptr<KvTransformCodec>> c = KvTransformCodec::Create(cal, *parse_kv_codec_config(name));
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  std::vector<v1::KvStreamMessage> cloud_stream(const KvTransformCodec& transform) {
    const std::vector<int32_t> prefix(prompt_.begin(), prompt_.end() - 1);
    F32KvCache cloud(geometry_, kCapacity);
    EXPECT_TRUE(engine_->prefill(prefix, cloud, nullptr).ok());
    cloud_ = std::make_unique<F32KvCache>(std::move(cloud));
    KvStreamHeaderInfo info;
    info.model = fingerprint_;
    info.codec = transform.config();
    info.token_ids = prefix;
    info.prefix_digest = prefix_digest(prefix);
    info.transform = &transform;
    std::vector<v1::KvStreamMessage> messages;
    KvStreamWriter writer(
        [&](const v1::KvStreamMessage& m) {
          messages.push_back(m);
          return absl::OkStatus();
        },
        KvStreamWriterOptions{2000});  // several blocks per layer and kind
    const absl::Status st = write_kv_segment(*cloud_, info, &rope_, writer);
    EXPECT_TRUE(st.ok()) << st;
    return messages;
  }

  KvStreamExpectation expectation() const {
    const std::vector<int32_t> prefix(prompt_.begin(), prompt_.end() - 1);
    KvStreamExpectation e;
    e.model = fingerprint_;
    e.first_position = 0;
    e.token_ids = prefix;
    e.prefix_digest = prefix_digest(prefix);
    return e;
  }

  std::vector<int32_t> prompt_;
  std::shared_ptr<const KvCalibration> calibration_;
  std::unique_ptr<F32KvCache> cloud_;
};

TEST_F(KvHandoffTransform, F32TargetHoldsTheDecodedRowsWithKeysRotated) {
  auto transform = coder("tc-b3-s4-w8", calibration_);
  const std::vector<v1::KvStreamMessage> messages = cloud_stream(*transform);
  EXPECT_EQ(messages.front().header().codec().codec(), v1::KV_CODEC_TC);
  F32KvCache edge(geometry_, kCapacity);
  KvReadOptions options;
  options.transform = transform.get();
  absl::StatusOr<KvSegmentLoad> load = read_kv_segment(messages, expectation(), &rope_, edge, options);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(edge.size(), kPromptTokens - 1);
  EXPECT_GT(load->decoded_blocks, 0u);
  EXPECT_EQ(load->decoded_on_arrival, load->decoded_blocks);
  // Close to the cloud's rows, not equal (3 bits per element), and the keys
  // are post-RoPE again (un-rotated keys would be far off).
  const int64_t kv_dim = geometry_.kv_dim();
  for (const bool is_key : {true, false}) {
    double err = 0, ref = 0;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      for (int64_t t = 0; t < edge.size(); ++t) {
        const float* a = is_key ? edge.k_row(layer, t) : edge.v_row(layer, t);
        const float* b = is_key ? cloud_->k_row(layer, t) : cloud_->v_row(layer, t);
        for (int64_t j = 0; j < kv_dim; ++j) {
          err += (double{a[j]} - b[j]) * (double{a[j]} - b[j]);
          ref += double{b[j]} * b[j];
        }
      }
    }
    EXPECT_LT(err / ref, 0.05) << (is_key ? "K" : "V");
    EXPECT_GT(err / ref, 1e-6) << (is_key ? "K" : "V");
  }
}

TEST_F(KvHandoffTransform, Int8StoreGetsTheSameRowsRequantized) {
  auto transform = coder("tc-b4", calibration_);
  const std::vector<v1::KvStreamMessage> messages = cloud_stream(*transform);
  KvReadOptions options;
  options.transform = transform.get();
  F32KvCache f32(geometry_, kCapacity);
  ASSERT_TRUE(read_kv_segment(messages, expectation(), &rope_, f32, options).ok());
  auto store = QuantizedKvCache::Create(geometry_, kCapacity, transform->int8_config());
  ASSERT_TRUE(store.ok()) << store.status();
  KvCodecConfig edge_default = default_kv_codec_config(KvCodecConfig::Bits::kInt8, geometry_);
  edge_default.zstd_level = 0;
  EXPECT_EQ((*store)->config(), edge_default);  // the edge's own INT8 store takes the blocks as they come
  absl::StatusOr<KvSegmentLoad> load = read_kv_segment(messages, expectation(), &rope_, **store, options);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_GT(load->ingested_blocks, 0u);
  EXPECT_EQ(load->decoded_blocks, 0u);
  // Every block was decoded while the stream arrived, none again at load.
  EXPECT_EQ(load->decoded_on_arrival, load->ingested_blocks);
  // load_kv_segment alone (no reader) decodes them itself, to the same store.
  KvStreamReader reader(expectation(), kv_reader_options_with_codec(geometry_));
  for (const v1::KvStreamMessage& m : messages) ASSERT_TRUE(reader.consume(v1::KvStreamMessage(m)).ok());
  absl::StatusOr<KvSegment> segment = reader.commit();
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto again = QuantizedKvCache::Create(geometry_, kCapacity, transform->int8_config());
  absl::StatusOr<KvSegmentLoad> direct = load_kv_segment(*segment, &rope_, **again, transform.get());
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->decoded_on_arrival, 0u);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      absl::StatusOr<QuantizedKvBlock> a = (*store)->export_block(layer, is_key, 0, kPromptTokens - 1);
      absl::StatusOr<QuantizedKvBlock> b = (*again)->export_block(layer, is_key, 0, kPromptTokens - 1);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->codes, b->codes);
      EXPECT_EQ(a->scales, b->scales);
    }
  }
  // The store's rows are the F32 target's rows within INT8 rounding.
  std::vector<float> row(static_cast<size_t>(geometry_.kv_dim()));
  const KvCodecConfig& form = (*store)->config();
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      for (int64_t t = 0; t < f32.size(); t += 7) {
        absl::StatusOr<QuantizedKvBlock> block = (*store)->export_block(layer, is_key, t, 1);
        ASSERT_TRUE(block.ok()) << block.status();
        ASSERT_TRUE(dequantize_kv_block(form, geometry_, is_key, *block, row.data()).ok());
        const float* want = is_key ? f32.k_row(layer, t) : f32.v_row(layer, t);
        float amax = 0;
        for (int64_t j = 0; j < geometry_.kv_dim(); ++j) amax = std::max(amax, std::fabs(want[j]));
        for (int64_t j = 0; j < geometry_.kv_dim(); ++j) EXPECT_NEAR(row[j], want[j], amax / 127.0f + 1e-6f);
      }
    }
  }
}

TEST_F(KvHandoffTransform, ReceiverWithoutOrWithAnotherCalibrationRefusesAndKeepsItsCache) {
  auto transform = coder("tc-b2", calibration_);
  const std::vector<v1::KvStreamMessage> messages = cloud_stream(*transform);
  auto other_cal = calibrate(testing::seeded_prompt(testing::shared_tiny_model(), kCalibrationTokens, 9));
  auto other = coder("tc-b2", other_cal);
  F32KvCache edge(geometry_, kCapacity);
  absl::StatusOr<KvSegmentLoad> none = read_kv_segment(messages, expectation(), &rope_, edge);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("no calibration"));
  KvReadOptions options;
  options.transform = other.get();
  absl::StatusOr<KvSegmentLoad> wrong = read_kv_segment(messages, expectation(), &rope_, edge, options);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), HasSubstr("tc_calibration"));
  EXPECT_EQ(edge.size(), 0);
  // A receiver that pins its own codec rejects the header by the fingerprint.
  KvStreamExpectation pinned = expectation();
  pinned.codec = *kv_codec_params(other->config());
  absl::StatusOr<KvSegmentLoad> fp = read_kv_segment(messages, pinned, &rope_, edge, options);
  EXPECT_FALSE(fp.ok());
  EXPECT_THAT(fp.status().message(), HasSubstr("tc_calibration"));
  EXPECT_EQ(edge.size(), 0);
}

TEST_F(KvHandoffTransform, CalibrationOfAnotherModelIsRefusedOnBothEnds) {
  KvCalibration other = *calibration_;
  other.model_digest = std::string(64, 'a');
  auto transform = coder("tc-b2", std::make_shared<const KvCalibration>(std::move(other)));
  F32KvCache cloud(geometry_, kCapacity);
  const std::vector<int32_t> prefix(prompt_.begin(), prompt_.end() - 1);
  ASSERT_TRUE(engine_->prefill(prefix, cloud, nullptr).ok());
  KvStreamHeaderInfo info;
  info.model = fingerprint_;
  info.codec = transform->config();
  info.token_ids = prefix;
  info.prefix_digest = prefix_digest(prefix);
  info.transform = transform.get();
  int sent = 0;
  KvStreamWriter writer([&](const v1::KvStreamMessage&) {
    ++sent;
    return absl::OkStatus();
  });
  const absl::Status st = write_kv_segment(cloud, info, &rope_, writer);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("calibration is for model"));
  EXPECT_EQ(sent, 0);
}

TEST_F(KvHandoffTransform, CodecParamsRoundTripAndFingerprintNamesTheCalibration) {
  auto transform = coder("tc-b2.5-s2-w8-z3", calibration_);
  absl::StatusOr<v1::CodecParams> params = kv_codec_params(transform->config());
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->transform().budget_tenths(), 25u);
  absl::StatusOr<KvCodecConfig> back = kv_codec_config_from_params(*params);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, transform->config());
  // Unbound: no stream can carry it.
  EXPECT_FALSE(kv_codec_params(*parse_kv_codec_config("tc-b2")).ok());
  KvFingerprint fp;
  fp.codec = *params;
  bool named = false;
  for (const auto& [name, value] : fp.codec_fields()) {
    if (name == "tc_calibration") named = value == to_hex(transform->config().transform->calibration);
  }
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace baton
