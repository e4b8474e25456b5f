// Sliding-window layers on the wire (DESIGN.md "Fingerprint": windows): a
// windowed layer's KV stream carries only the positions the next query can
// see, [max(first, end - W + 1), end); the stream is version 2 and its model
// fingerprint names the windows; the reader rejects windows that differ from
// the receiver's; and a windowed store that received only the tail attends
// exactly like a full store with the mask, before and after decode steps
// past the window. The geometry sets layer_window directly (no windowed
// model is needed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_codec/kv_quant.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/util/sha256.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kCapacity = 64;
constexpr int kVocab = 1000;

// Layer 0: window 8, layer 1: full, layer 2: window 5.
KvGeometry windowed_geometry(std::vector<int32_t> windows = {8, 0, 5}) {
  return KvGeometry{3, 4, 2, 16, std::move(windows)};
}

ModelFingerprint fingerprint_for(const KvGeometry& g) {
  ModelFingerprint fp;
  fp.fields = {{"version", "1"},         {"arch", "test"},   {"n_layer", std::to_string(g.n_layer)},
               {"n_head", std::to_string(g.n_head)},  {"n_head_kv", std::to_string(g.n_head_kv)},
               {"head_dim", std::to_string(g.head_dim)}, {"n_vocab", std::to_string(kVocab)}};
  if (has_sliding_window(g.layer_window)) fp.fields.emplace_back("layer_window", layer_window_text(g.layer_window));
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

std::vector<float> random_rows(std::mt19937& rng, int64_t n, int64_t dim) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * dim));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<int32_t> tokens_of(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 37 + 11) % kVocab;
  return ids;
}

KvCodecConfig codec(const std::string& name) {
  auto c = parse_kv_codec_config(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

class KvWindowStream : public ::testing::Test {
 protected:
  void SetUp() override { fill(windowed_geometry()); }

  void fill(const KvGeometry& g) {
    geometry_ = g;
    source_ = std::make_unique<F32KvCache>(g, kCapacity);
    std::mt19937 rng(17);
    for (int layer = 0; layer < g.n_layer; ++layer) {
      const std::vector<float> k = random_rows(rng, kCapacity, g.kv_dim());
      const std::vector<float> v = random_rows(rng, kCapacity, g.kv_dim());
      ASSERT_TRUE(source_->store(layer, 0, kCapacity, k.data(), v.data()).ok());
    }
    source_->set_size(kCapacity);
  }

  // The segment [first, end) of the source as a stream (small blocks).
  std::vector<v1::KvStreamMessage> stream(const KvCodecConfig& c, int first, int end) {
    const std::vector<int32_t> ids = tokens_of(end);
    KvStreamHeaderInfo info;
    info.model = fingerprint_for(geometry_);
    info.codec = c;
    info.first_position = static_cast<uint32_t>(first);
    info.token_ids.assign(ids.begin() + first, ids.end());
    info.prefix_digest = prefix_digest(ids);
    std::vector<v1::KvStreamMessage> messages;
    KvStreamWriter writer(
        [&](const v1::KvStreamMessage& m) {
          messages.push_back(m);
          return absl::OkStatus();
        },
        KvStreamWriterOptions{400});
    const absl::Status st = write_kv_segment(*source_, info, nullptr, writer);
    EXPECT_TRUE(st.ok()) << st;
    return messages;
  }

  KvStreamExpectation expectation(const KvGeometry& g, int first, int end) const {
    const std::vector<int32_t> ids = tokens_of(end);
    KvStreamExpectation e;
    e.model = fingerprint_for(g);
    e.first_position = static_cast<uint32_t>(first);
    e.token_ids = std::vector<int32_t>(ids.begin() + first, ids.end());
    e.prefix_digest = prefix_digest(ids);
    return e;
  }

  KvGeometry geometry_;
  std::unique_ptr<F32KvCache> source_;
};

TEST(LayerWindowText, RoundTripsAndRejectsBadLists) {
  const std::vector<int32_t> gemma = {512, 512, 512, 512, 512, 0, 512, 512, 512, 512, 512, 0, 512};
  EXPECT_EQ(layer_window_text(gemma), "512x5,0,512x5,0,512");
  auto parsed = parse_layer_window_text("512x5,0,512x5,0,512", 13);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, gemma);
  EXPECT_FALSE(parse_layer_window_text("512x5,0", 7).ok());      // 6 layers listed
  EXPECT_FALSE(parse_layer_window_text("512x99999999", 4).ok());  // capped before allocation
  EXPECT_FALSE(parse_layer_window_text("-4,0", 2).ok());
  EXPECT_FALSE(parse_layer_window_text("4x0,0", 2).ok());
  EXPECT_FALSE(parse_layer_window_text("4x2x1", 2).ok());
  EXPECT_EQ(window_first_kept_position(8, 20), 13);  // next query at 20 sees (12, 20]
  EXPECT_EQ(window_first_kept_position(8, 5), 0);
  EXPECT_EQ(window_first_kept_position(0, 20), 0);
}

// Fails if a windowed layer sends positions no later query reads (or too few).
TEST_F(KvWindowStream, WindowedLayersCarryOnlyTheirTail) {
  for (const auto& [first, end] : std::vector<std::pair<int, int>>{{0, 3}, {0, 8}, {0, 9}, {0, 30}, {6, 30}, {26, 30}}) {
    SCOPED_TRACE(testing::Message() << "segment [" << first << ", " << end << ")");
    const std::vector<v1::KvStreamMessage> messages = stream(codec("f16"), first, end);
    ASSERT_FALSE(messages.empty());
    EXPECT_EQ(messages.front().header().format_version(), kKvStreamWindowedFormatVersion);
    std::vector<int64_t> tokens(6, 0);
    for (const v1::KvStreamMessage& m : messages) {
      if (!m.has_block()) continue;
      const int layer = static_cast<int>(m.block().layer());
      const int64_t lowest = std::max<int64_t>(first, window_first_kept_position(geometry_.window(layer), end));
      EXPECT_GE(m.block().token_begin(), lowest) << "layer " << layer;
      tokens[static_cast<size_t>(2 * layer + (m.block().kind() == v1::KV_KIND_V))] += m.block().token_count();
    }
    EXPECT_EQ(tokens[0], end - std::max(first, end - 7));  // window 8: (end - 8, end)
    EXPECT_EQ(tokens[2], end - first);
    EXPECT_EQ(tokens[4], end - std::max(first, end - 4));  // window 5
    EXPECT_EQ(tokens[1], tokens[0]);
    EXPECT_EQ(tokens[5], tokens[4]);
  }
}

TEST_F(KvWindowStream, FullAttentionStreamsStayVersionOne) {
  fill(windowed_geometry({}));
  const std::vector<v1::KvStreamMessage> messages = stream(codec("f16"), 0, 20);
  EXPECT_EQ(messages.front().header().format_version(), kKvStreamFormatVersion);
  for (const v1::FingerprintField& f : messages.front().header().fingerprint().model().fields()) {
    EXPECT_NE(f.name(), "layer_window");
  }
}

// Naive masked attention over f32 rows (the full-store reference): query at
// position p of a layer with window W sees keys [max(0, p - W + 1), p].
std::vector<float> masked_reference(const KvGeometry& g, int layer, int64_t p, const float* q,
                                    const std::vector<float>& k, const std::vector<float>& v) {
  const int64_t kv_dim = g.kv_dim();
  const int per_kv = g.n_head / g.n_head_kv;
  const int64_t from = window_first_kept_position(g.window(layer), p);
  std::vector<float> out(static_cast<size_t>(g.q_dim()), 0.0f);
  for (int h = 0; h < g.n_head; ++h) {
    const int kv_h = h / per_kv;
    std::vector<double> scores;
    double top = -1e300;
    for (int64_t j = from; j <= p; ++j) {
      double dot = 0;
      for (int d = 0; d < g.head_dim; ++d) dot += double{q[h * g.head_dim + d]} * k[j * kv_dim + kv_h * g.head_dim + d];
      scores.push_back(dot / std::sqrt(static_cast<double>(g.head_dim)));
      top = std::max(top, scores.back());
    }
    double total = 0;
    for (double& s : scores) total += (s = std::exp(s - top));
    for (int64_t j = from; j <= p; ++j) {
      const double w = scores[static_cast<size_t>(j - from)] / total;
      for (int d = 0; d < g.head_dim; ++d) {
        out[static_cast<size_t>(h * g.head_dim + d)] += static_cast<float>(w * v[j * kv_dim + kv_h * g.head_dim + d]);
      }
    }
  }
  return out;
}

// f16-rounded rows [0, n) of one layer of the source (what an F16 store holds).
std::vector<float> f16_rows(const F32KvCache& src, int layer, bool is_key, int64_t n) {
  const int64_t dim = src.geometry().kv_dim();
  std::vector<float> out(static_cast<size_t>(n * dim));
  std::vector<uint16_t> half(out.size());
  for (int64_t t = 0; t < n; ++t) {
    const float* row = is_key ? src.k_row(layer, t) : src.v_row(layer, t);
    std::copy(row, row + dim, out.begin() + t * dim);
  }
  kv_quant::f32_to_f16(out.data(), half.data(), static_cast<int64_t>(out.size()));
  kv_quant::f16_to_f32(half.data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Fails if the reader drops tail positions, the store misplaces them, or
// attend reads keys outside the window (the positions before the tail were
// never sent: reading them reads zeros).
TEST_F(KvWindowStream, TailOnlyStoreAttendsLikeTheMaskedFullStore) {
  constexpr int kDecodeSteps = 12;
  for (const int end : {4, 8, 13, 30}) {  // < W, = W, > W for both windows
    SCOPED_TRACE(testing::Message() << "context " << end);
    auto store = QuantizedKvCache::Create(geometry_, kCapacity, codec("f16"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto load = read_kv_segment(stream(codec("f16"), 0, end), expectation(geometry_, 0, end), nullptr, **store);
    ASSERT_TRUE(load.ok()) << load.status();
    ASSERT_EQ((*store)->size(), end);
    // Positions before a windowed layer's tail were never sent.
    const int64_t tail0 = window_first_kept_position(8, end);
    if (tail0 > 0) {
      auto early = (*store)->export_block(0, /*is_key=*/true, 0, tail0);
      ASSERT_TRUE(early.ok());
      EXPECT_TRUE(std::all_of(early->codes.begin(), early->codes.end(), [](uint8_t b) { return b == 0; }));
    }
    std::mt19937 rng(static_cast<unsigned>(end));
    // The edge runs position `end` itself (the n-1 rule), then decodes: each
    // step stores its own K/V and attends.
    for (int step = 0; step < kDecodeSteps; ++step) {
      const int64_t p = end + step;
      for (int layer = 0; layer < geometry_.n_layer; ++layer) {
        ASSERT_TRUE((*store)->store(layer, p, 1, source_->k_row(layer, p), source_->v_row(layer, p)).ok());
      }
      (*store)->set_size(p + 1);
      const std::vector<float> q = random_rows(rng, 1, geometry_.q_dim());
      for (int layer = 0; layer < geometry_.n_layer; ++layer) {
        const std::vector<float> k = f16_rows(*source_, layer, true, p + 1);
        const std::vector<float> v = f16_rows(*source_, layer, false, p + 1);
        const std::vector<float> want = masked_reference(geometry_, layer, p, q.data(), k, v);
        std::vector<float> got(want.size());
        (*store)->attend(layer, p, 1, q.data(), got.data(), nullptr);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4) << "layer " << layer << " position " << p << " element " << i;
        }
      }
    }
  }
}

// A delta segment [first, end) after a local prefix: still only the tail.
TEST_F(KvWindowStream, DeltaSegmentLoadsAfterHeldPrefix) {
  auto store = QuantizedKvCache::Create(geometry_, kCapacity, codec("int8-g16"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(read_kv_segment(stream(codec("int8-g16"), 0, 10), expectation(geometry_, 0, 10), nullptr, **store).ok());
  auto load = read_kv_segment(stream(codec("int8-g16"), 10, 27), expectation(geometry_, 10, 27), nullptr, **store);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ((*store)->size(), 27);
}

// Per-channel keys align blocks to key groups; a streamed (chunked) windowed
// layer sends a partial head block that the reader accepts.
TEST_F(KvWindowStream, ChunkedPerChannelTailIsAccepted) {
  const KvCodecConfig c = codec("int8-pc-kg4-g16");
  constexpr int kEnd = 21;
  const std::vector<int32_t> ids = tokens_of(kEnd);
  KvStreamHeaderInfo info;
  info.model = fingerprint_for(geometry_);
  info.codec = c;
  info.token_ids = ids;
  info.prefix_digest = prefix_digest(ids);
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  auto header = make_kv_header(info);
  ASSERT_TRUE(header.ok());
  ASSERT_TRUE(writer.write_header(*header).ok());
  const KvRowsFn rows = f32_kv_rows(*source_);
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const auto& [b, n] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 8}, {8, 8}, {16, 5}}) {
      const absl::Status st = write_kv_layer_range(rows, geometry_, c, nullptr, layer, b, n, writer);
      ASSERT_TRUE(st.ok()) << st;
    }
  }
  ASSERT_TRUE(writer.write_trailer().ok());
  auto store = QuantizedKvCache::Create(geometry_, kCapacity, QuantizedKvCache::store_config_for(c));
  ASSERT_TRUE(store.ok());
  auto load = read_kv_segment(messages, expectation(geometry_, 0, kEnd), nullptr, **store);
  ASSERT_TRUE(load.ok()) << load.status();
}

// Fails if the reader accepts a window list other than the receiver's: the
// receiver's store would hold the wrong positions.
TEST_F(KvWindowStream, MismatchedWindowsAreRejectedAndTheStoreIsUnchanged) {
  const std::vector<v1::KvStreamMessage> messages = stream(codec("f16"), 0, 20);
  for (const std::vector<int32_t>& ours : std::vector<std::vector<int32_t>>{{8, 0, 4}, {}, {8, 8, 5}}) {
    const KvGeometry edge = windowed_geometry(ours);
    auto store = QuantizedKvCache::Create(edge, kCapacity, codec("f16"));
    ASSERT_TRUE(store.ok());
    auto load = read_kv_segment(messages, expectation(edge, 0, 20), nullptr, **store);
    ASSERT_FALSE(load.ok());
    EXPECT_EQ(load.status().code(), absl::StatusCode::kFailedPrecondition) << load.status();
    EXPECT_THAT(std::string(load.status().message()), HasSubstr("layer_window"));
    EXPECT_EQ((*store)->size(), 0);
  }
}

TEST_F(KvWindowStream, MalformedWindowedStreamsAreRejected) {
  const std::vector<v1::KvStreamMessage> good = stream(codec("f16"), 0, 20);
  auto expect_rejected = [&](std::vector<v1::KvStreamMessage> messages, absl::StatusCode code,
                             const std::string& text) {
    auto store = QuantizedKvCache::Create(geometry_, kCapacity, codec("f16"));
    ASSERT_TRUE(store.ok());
    auto load = read_kv_segment(messages, expectation(geometry_, 0, 20), nullptr, **store);
    ASSERT_FALSE(load.ok()) << text;
    EXPECT_EQ(load.status().code(), code) << load.status();
    EXPECT_THAT(std::string(load.status().message()), HasSubstr(text));
    EXPECT_EQ((*store)->size(), 0);
  };
  {  // A windowed stream claiming version 1.
    auto messages = good;
    messages[0].mutable_header()->set_format_version(kKvStreamFormatVersion);
    expect_rejected(messages, absl::StatusCode::kInvalidArgument, "has sliding-window layers");
  }
  {  // Truncated: the last block of layer 2 (windowed) is missing.
    auto messages = good;
    for (size_t i = messages.size() - 1; i > 0; --i) {
      if (messages[i].has_block() && messages[i].block().layer() == 2) {
        messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    expect_rejected(messages, absl::StatusCode::kInvalidArgument, "is missing layer 2");
  }
  {  // A block before the tail.
    auto messages = good;
    for (v1::KvStreamMessage& m : messages) {
      if (m.has_block() && m.block().layer() == 0) {
        m.mutable_block()->set_token_begin(m.block().token_begin() - 1);
        break;
      }
    }
    expect_rejected(messages, absl::StatusCode::kInvalidArgument, "sliding window of 8 tokens");
  }
  {  // A layer_window field the model's layer count cannot hold.
    auto messages = good;
    v1::ModelFingerprint* model = messages[0].mutable_header()->mutable_fingerprint()->mutable_model();
    for (v1::FingerprintField& f : *model->mutable_fields()) {
      if (f.name() == "layer_window") f.set_value("8,0");
    }
    auto store = QuantizedKvCache::Create(geometry_, kCapacity, codec("f16"));
    ASSERT_TRUE(store.ok());
    EXPECT_FALSE(read_kv_segment(messages, expectation(geometry_, 0, 20), nullptr, **store).ok());
    EXPECT_EQ((*store)->size(), 0);
  }
}

}  // namespace
}  // namespace baton
