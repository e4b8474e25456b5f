// libFuzzer target: the rANS coder (common/kv_codec/rans.h). Must never crash,
// read past its input or hang. Input: byte 0 = mode (bit 7) and column count
// (bits 0-2: 1..8 columns; bits 3-6 rotate a fixed palette of models: constant,
// two symbols, skewed with frequency-1 symbols, Gaussians of 9 and 40, 256
// symbols), bytes 1-2 = n_rows (little-endian, < 4096), then:
//   mode 0: the bytes are a stream for rans_decode. Any error must be
//           InvalidArgument; a stream that decodes must re-encode to the same
//           bytes (the coder is a bijection on valid streams).
//   mode 1: the bytes are symbols (rows of n_cols, n_rows ignored), encoded;
//           an out-of-model symbol must give InvalidArgument, anything else
//           must decode back, and the stream with one byte changed (position
//           from bytes 1-2) must decode or fail as in mode 0.
// Build and run: tests/fuzz/build.sh kv && tests/fuzz/run.sh rans 600
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/kv_codec/rans.h"

namespace {

using baton::RansModel;

const std::vector<RansModel>& palette() {
  static const std::vector<RansModel> models = [] {
    std::vector<std::vector<double>> weights = {{1.0}, {1.0, 3.0}, {4000.0, 1.0, 1.0, 0.0}};
    for (int n : {9, 40}) {
      std::vector<double> w(n);
      for (int s = 0; s < n; ++s) w[s] = 1.0 / (1.0 + (s - n / 2) * (s - n / 2));
      weights.push_back(w);
    }
    std::vector<double> wide(256);
    for (int s = 0; s < 256; ++s) wide[s] = static_cast<double>((s * 37) % 101);
    weights.push_back(wide);
    std::vector<RansModel> out;
    for (const auto& w : weights) out.push_back(*baton::make_rans_model(w));
    return out;
  }();
  return models;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rans_fuzz: %s\n", what);
  std::abort();
}

// Decodes `stream`; checks the error kind or that it re-encodes to itself.
void check_decode(std::string_view stream, int64_t n_rows, int n_cols, const std::vector<const RansModel*>& models) {
  std::vector<uint8_t> out(static_cast<size_t>(n_rows * n_cols));
  const absl::Status st = baton::rans_decode(stream, n_rows, n_cols, models, out.data());
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kInvalidArgument) fail("decode error is not InvalidArgument");
    return;
  }
  absl::StatusOr<std::string> again = baton::rans_encode(out.data(), n_rows, n_cols, models);
  if (!again.ok() || *again != stream) fail("a decoded stream does not re-encode to the same bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool round_trip = data[0] & 0x80;
  const int n_cols = 1 + (data[0] & 7);
  const int rotate = (data[0] >> 3) & 15;
  const int64_t n_rows = (data[1] | data[2] << 8) & 4095;
  const std::vector<RansModel>& pal = palette();
  std::vector<const RansModel*> models;
  for (int c = 0; c < n_cols; ++c) models.push_back(&pal[(c + rotate) % pal.size()]);
  const std::string_view rest(reinterpret_cast<const char*>(data + 3), size - 3);
  if (!round_trip) {
    check_decode(rest, n_rows, n_cols, models);
    return 0;
  }
  const int64_t rows = static_cast<int64_t>(rest.size()) / n_cols;
  const auto* symbols = reinterpret_cast<const uint8_t*>(rest.data());
  absl::StatusOr<std::string> enc = baton::rans_encode(symbols, rows, n_cols, models);
  bool in_models = true;
  for (int64_t i = 0; i < rows * n_cols; ++i) {
    if (symbols[i] >= models[i % n_cols]->n_symbols()) in_models = false;
  }
  if (!in_models) {
    if (enc.ok() || enc.status().code() != absl::StatusCode::kInvalidArgument) fail("bad symbol not rejected");
    return 0;
  }
  if (!enc.ok()) fail("encode of valid symbols failed");
  std::vector<uint8_t> out(static_cast<size_t>(rows * n_cols));
  if (!baton::rans_decode(*enc, rows, n_cols, models, out.data()).ok()) fail("round trip does not decode");
  if (out != std::vector<uint8_t>(symbols, symbols + rows * n_cols)) fail("round trip changed the symbols");
  std::string changed = *enc;
  changed[static_cast<size_t>(n_rows) % changed.size()] ^= static_cast<char>(1 + (data[0] & 0x7f));
  check_decode(changed, rows, n_cols, models);
  return 0;
}
