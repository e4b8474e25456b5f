// Regression tests for what fuzzing the transform KV codec and its
// calibration found (tests/fuzz/kv_transform_fuzz.cc, kv_calibration_fuzz.cc).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "tests/support/synthetic_calibration.h"

namespace baton {
namespace {

using testing::synthetic_kv_calibration;
using testing::synthetic_kv_rows;

const KvGeometry kGeometry{2, 2, 2, 8, {}};

std::unique_ptr<KvTransformCodec> codec_for(std::shared_ptr<const KvCalibration> cal, int zstd_level) {
  KvTransformParams params;
  params.sink_tokens = 1;
  params.recent_tokens = 2;
  absl::StatusOr<std::unique_ptr<KvTransformCodec>> made =
      KvTransformCodec::Create(std::move(cal), transform_kv_codec_config(params, zstd_level));
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? std::move(*made) : nullptr;
}

// A (layer, kind) with no coded component (every variance 0) made the
// encoder call rANS with 0 columns ("rANS: 0 columns; want 1..65536"): no
// block with transform rows could be sent. Now nothing follows the INT8 rows
// and the transform rows decode to the means.
TEST(KvTransformFuzzRegressionTest, NoActiveComponentRoundTripsToTheMeans) {
  KvCalibration c = synthetic_kv_calibration(kGeometry, 3);
  for (int h = 0; h < kGeometry.n_head_kv; ++h) {
    for (float& v : c.heads[static_cast<size_t>(1 * kGeometry.n_head_kv + h)].variance) v = 0.0f;  // layer 0 V
  }
  auto cal = std::make_shared<const KvCalibration>(std::move(c));
  for (int zstd : {0, 3}) {
    std::unique_ptr<KvTransformCodec> codec = codec_for(cal, zstd);
    ASSERT_NE(codec, nullptr);
    ASSERT_TRUE(codec->plan(0, false).active.empty());
    const int64_t n = 10, kv_dim = kGeometry.kv_dim();
    const std::vector<float> rows = synthetic_kv_rows(*cal, 0, false, n, 5);
    absl::StatusOr<EncodedKvBlock> enc = codec->encode(0, false, 0, n, rows.data(), n);
    ASSERT_TRUE(enc.ok()) << enc.status();
    // Only the INT8 rows: 1 sink and 2 recent.
    EXPECT_EQ(enc->payload.size(), kv_block_raw_size(codec->int8_config(), codec->geometry(), false, 3));
    std::vector<float> out(rows.size());
    ASSERT_TRUE(codec->decode(0, false, 0, n, enc->payload, enc->raw_size, n, out.data()).ok());
    for (int64_t t = 1; t < n - 2; ++t) {
      for (int h = 0; h < kGeometry.n_head_kv; ++h) {
        for (int j = 0; j < kGeometry.head_dim; ++j) {
          EXPECT_EQ(out[static_cast<size_t>(t * kv_dim + h * kGeometry.head_dim + j)],
                    cal->head(0, false, h).mean[static_cast<size_t>(j)]);
        }
      }
    }
    // A byte after the INT8 rows has nowhere to go.
    EXPECT_EQ(codec->decode(0, false, 0, n, enc->payload + "x", enc->raw_size, n, out.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace baton
