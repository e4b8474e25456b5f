// libFuzzer target: the .batoncal parser (common/kv_codec/kv_calibration.h)
// on hostile bytes. Must never crash, hang or allocate beyond what the input
// size and the declared-size caps allow (run.sh runs it with
// -rss_limit_mb=2048; libFuzzer's -malloc_limit_mb defaults to the same, so
// a single allocation above 2 GiB is a finding too); every error must
// be InvalidArgument. A calibration that parses must serialize to the same
// bytes, and since a calibration can arrive from a prefix pack or the cloud,
// it must also give a transform codec (tc-b2.5) that either refuses it with
// InvalidArgument or round-trips a small block (24 tokens: INT8 sink and
// recent rows and transform rows, both back ends) to finite values.
//
// Seeds: BATON_FUZZ_WRITE_SEEDS=DIR kv_calibration_fuzz writes small valid
// files (1 layer, 1 head, head_dim 4 and 8; format 1, and format 2 with a
// quality table) to DIR and exits; the checked-in
// ones are tests/fuzz/corpus/kv_calibration/.
// Build and run: tests/fuzz/build.sh kv && tests/fuzz/run.sh kv_calibration 600
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "tests/support/synthetic_calibration.h"

namespace {

using baton::KvCalibration;

[[noreturn]] void fail(const char* what, const absl::Status& st = absl::OkStatus()) {
  std::fprintf(stderr, "kv_calibration_fuzz: %s %s\n", what, st.ToString().c_str());
  std::abort();
}

// Rows near each head's mean (clamped to f16), so that they are valid input.
std::vector<float> rows_for(const KvCalibration& cal, int layer, bool is_key, int64_t n_tokens) {
  const int d = cal.head_dim;
  std::vector<float> rows(static_cast<size_t>(n_tokens) * cal.n_head_kv * d);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < cal.n_head_kv; ++h) {
      const std::vector<float>& mean = cal.head(layer, is_key, h).mean;
      for (int j = 0; j < d; ++j) {
        const float noise = static_cast<float>((t * 7 + j * 3) % 11 - 5) * 0.25f;
        rows[static_cast<size_t>((t * cal.n_head_kv + h) * d + j)] =
            std::clamp(mean[static_cast<size_t>(j)] + noise, -65504.0f, 65504.0f);
      }
    }
  }
  return rows;
}

void check_codec(std::shared_ptr<const KvCalibration> cal) {
  for (int zstd : {0, 3}) {
    baton::KvTransformParams params;  // tc-b2.5-s4-w16
    auto codec = baton::KvTransformCodec::Create(cal, baton::transform_kv_codec_config(params, zstd));
    if (!codec.ok()) {
      if (codec.status().code() != absl::StatusCode::kInvalidArgument) fail("Create error", codec.status());
      return;
    }
    const int64_t n = 24;  // positions [0, 24) of a stream of 24: 4 sink, 4 coded, 16 recent
    const int64_t kv_dim = (*codec)->geometry().kv_dim();
    for (int layer = 0; layer < std::min(cal->n_layer, 2); ++layer) {
      for (const bool is_key : {true, false}) {
        const std::vector<float> rows = rows_for(*cal, layer, is_key, n);
        absl::StatusOr<baton::EncodedKvBlock> enc = (*codec)->encode(layer, is_key, 0, n, rows.data(), n);
        if (!enc.ok()) fail("encode of rows within f16 failed", enc.status());
        std::vector<float> out(static_cast<size_t>(n * kv_dim), std::numeric_limits<float>::quiet_NaN());
        const absl::Status st = (*codec)->decode(layer, is_key, 0, n, enc->payload, enc->raw_size, n, out.data());
        if (!st.ok()) fail("a block the encoder wrote does not decode", st);
        for (float v : out) {
          if (!std::isfinite(v)) fail("a calibration that parses decodes a block to a non-finite value");
        }
      }
    }
  }
}

void write_seeds(const std::string& dir) {
  int written = 0;
  for (int d : {4, 8}) {
    for (uint64_t seed : {1, 2}) {
      KvCalibration c = baton::testing::synthetic_kv_calibration(baton::KvGeometry{1, 1, 1, d, {}}, seed);
      c.pre_rope_keys = seed == 1;
      c.source = seed == 1 ? "seed" : "";
      // Seed 2 carries a quality table (format 2).
      if (seed == 2) c.quality = {{"tc-b2", 0.2, 0.03, 3e-4}, {"int4-pc-kg128-g32-z3", 0.27, -0.07, 1.8e-3}};
      std::ofstream(dir + "/cal_d" + std::to_string(d) + "_" + std::to_string(seed), std::ios::binary)
          << baton::serialize_kv_calibration(c);
      ++written;
    }
  }
  std::fprintf(stderr, "kv_calibration_fuzz: wrote %d seeds to %s\n", written, dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("BATON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<KvCalibration> cal = baton::parse_kv_calibration(bytes);
  if (!cal.ok()) {
    if (cal.status().code() != absl::StatusCode::kInvalidArgument) fail("parse error", cal.status());
    return 0;
  }
  if (baton::serialize_kv_calibration(*cal) != bytes) fail("a parsed calibration re-serializes to other bytes");
  check_codec(std::make_shared<const KvCalibration>(*std::move(cal)));
  return 0;
}
