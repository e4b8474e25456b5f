// libFuzzer target: the transform KV codec's decoder
// (common/kv_codec/kv_transform_codec.h) on hostile payloads. Must never
// crash, hang or read out of bounds; every error must be InvalidArgument; a
// decode that succeeds must write only finite floats (the output starts as
// NaN, so a row left unwritten fails too).
//
// Codecs: a fixed palette built once from two seeded calibrations
// (tests/support/synthetic_calibration.h): A = 2 layers, 2 KV heads,
// head_dim 32 (INT8 groups of 32); B = 2 layers, 2 heads, head_dim 8 with
// degenerate parts (a head of zero variances: no coded component; a shape
// all in one bin: one-symbol models; a shape in the end bins; a flat shape),
// each at a few budgets, sink / recent settings and both back ends.
//
// Input: an 8-byte header, then the rest.
//   byte 0    codec (index into the palette, modulo its size)
//   byte 1    bit 7: round-trip mode; bit 0: K (1) or V; bits 1-2: layer
//             (3: an out-of-range layer); bits 3-4: raw_size (0, 1: exact;
//             2: exact + (int8) byte 7; 3: 0 or 2^63)
//   bytes 2-3 n_tokens = (little-endian) % 301
//   bytes 4-5 token_begin = (little-endian) % 1024
//   byte 6    bits 0-6: stream_end = token_begin + n_tokens + that (bit 7
//             set: minus that, possibly before the block's end)
//   byte 7    raw_size delta / row seed and scale / flipped byte
//   decode mode: the rest is the payload.
//   round-trip mode: rows (valid layer, n_tokens >= 1, stream_end after the
//   block) are synthetic rows of the calibration, seeded by byte 7, plus the
//   rest as signed bytes times a scale (byte 7 bits 6-7: 0, 1/16, 4, 1024);
//   with byte 6 bit 7 the rest overwrites the first floats as raw f32 bit
//   patterns. Encoding must succeed exactly when every value is finite and
//   within f16 (else InvalidArgument), decoding the result must succeed with
//   finite output, and the payload with one byte changed must decode or
//   fail as in decode mode.
//
// Seeds: BATON_FUZZ_WRITE_SEEDS=DIR kv_transform_fuzz writes valid blocks
// (decode mode) and a few round-trip inputs to DIR and exits; the checked-in
// ones are tests/fuzz/corpus/kv_transform/.
// Build and run: tests/fuzz/build.sh kv && tests/fuzz/run.sh kv_transform 600
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
using baton::KvTransformCodec;

constexpr size_t kHeader = 8;
constexpr int kMaxTokens = 300;

// Calibration B: small heads and degenerate parts.
KvCalibration degenerate_calibration() {
  KvCalibration c = baton::testing::synthetic_kv_calibration(baton::KvGeometry{2, 2, 2, 8, {}}, 7, 0.5);
  for (float& v : c.heads[1].variance) v = 0.0f;  // layer 0 K head 1: nothing coded
  std::vector<float>& one_bin = c.shape[1];         // layer 0 V: all mass at z ~ 0
  one_bin.assign(one_bin.size(), 0.0f);
  one_bin[one_bin.size() / 2] = 1.0f;
  std::vector<float>& tails = c.shape[2];  // layer 1 K: all mass in the end bins
  tails.assign(tails.size(), 0.0f);
  tails.front() = 0.5f;
  tails.back() = 0.5f;
  c.shape[3].assign(c.shape[3].size(), 1.0f / static_cast<float>(c.shape[3].size()));  // layer 1 V: flat
  return c;
}

struct Palette {
  std::vector<std::unique_ptr<KvTransformCodec>> codecs;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "kv_transform_fuzz: %s\n", what);
  std::abort();
}

void add_codecs(Palette& p, const std::shared_ptr<const KvCalibration>& cal, std::initializer_list<int> budgets,
                std::initializer_list<std::pair<int, int>> windows) {
  for (int budget : budgets) {
    for (const auto& [sink, recent] : windows) {
      for (int zstd : {0, 3}) {
        baton::KvTransformParams params;
        params.budget_tenths = budget;
        params.sink_tokens = sink;
        params.recent_tokens = recent;
        auto codec = KvTransformCodec::Create(cal, baton::transform_kv_codec_config(params, zstd));
        if (!codec.ok()) fail("a palette codec does not build");
        p.codecs.push_back(std::move(*codec));
      }
    }
  }
}

const Palette& palette() {
  static const Palette p = [] {
    Palette out;
    auto a = std::make_shared<const KvCalibration>(
        baton::testing::synthetic_kv_calibration(baton::KvGeometry{2, 2, 2, 32, {}}, 1));
    auto b = std::make_shared<const KvCalibration>(degenerate_calibration());
    add_codecs(out, a, {10, 25, 40, 80}, {{4, 16}, {0, 0}, {2, 5}});
    add_codecs(out, b, {10, 25, 80}, {{4, 16}, {0, 0}});
    return out;
  }();
  return p;
}

struct Block {
  const KvTransformCodec* codec = nullptr;
  int layer = 0;
  bool is_key = false;
  int64_t n_tokens = 0, token_begin = 0, stream_end = 0;
  uint64_t raw_size = 0;
};

Block read_header(const uint8_t* data) {
  const Palette& p = palette();
  Block b;
  b.codec = p.codecs[data[0] % p.codecs.size()].get();
  b.is_key = data[1] & 1;
  const int n_layer = b.codec->geometry().n_layer;
  const int layer_bits = (data[1] >> 1) & 3;
  b.layer = layer_bits == 3 ? ((data[7] & 1) ? -1 : n_layer) : layer_bits % n_layer;
  b.n_tokens = (data[2] | data[3] << 8) % (kMaxTokens + 1);
  b.token_begin = (data[4] | data[5] << 8) % 1024;
  const int slack = data[6] & 0x7f;
  b.stream_end = b.token_begin + b.n_tokens + ((data[6] & 0x80) ? -slack : slack);
  const uint64_t exact = 2 * static_cast<uint64_t>(b.n_tokens) * static_cast<uint64_t>(b.codec->geometry().kv_dim());
  switch ((data[1] >> 3) & 3) {
    case 2: b.raw_size = exact + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(data[7]))); break;
    case 3: b.raw_size = (data[7] & 1) ? uint64_t{1} << 63 : 0; break;
    default: b.raw_size = exact;
  }
  return b;
}

// Decodes; checks the error kind or that every output is finite.
void check_decode(const Block& b, std::string_view payload, uint64_t raw_size) {
  const int64_t kv_dim = b.codec->geometry().kv_dim();
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(b.n_tokens, 0) * kv_dim),
                         std::numeric_limits<float>::quiet_NaN());
  const absl::Status st =
      b.codec->decode(b.layer, b.is_key, b.token_begin, b.stream_end, payload, raw_size, b.n_tokens, out.data());
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kInvalidArgument) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      fail("decode error is not InvalidArgument");
    }
    return;
  }
  for (float v : out) {
    if (!std::isfinite(v)) fail("a decoded block has a non-finite (or unwritten) value");
  }
}

// The rows of round-trip mode (see the file comment); `valid` says whether
// every value is finite and within f16.
std::vector<float> make_rows(const Block& b, std::string_view rest, uint8_t seed, bool raw_floats, bool& valid) {
  std::vector<float> rows =
      baton::testing::synthetic_kv_rows(b.codec->calibration(), b.layer, b.is_key, b.n_tokens, seed);
  if (raw_floats) {
    const size_t n = std::min(rows.size(), rest.size() / sizeof(float));
    std::memcpy(rows.data(), rest.data(), n * sizeof(float));
  } else {
    static constexpr float kScales[4] = {0.0f, 1.0f / 16, 4.0f, 1024.0f};
    const float scale = kScales[seed >> 6];
    for (size_t i = 0; i < rest.size(); ++i) {
      rows[i % rows.size()] += static_cast<float>(static_cast<int8_t>(rest[i])) * scale;
    }
  }
  valid = true;
  for (float v : rows) valid = valid && std::isfinite(v) && std::fabs(v) <= 65504.0f;
  return rows;
}

void round_trip(Block b, const uint8_t* data, std::string_view rest) {
  const int n_layer = b.codec->geometry().n_layer;
  if (b.layer < 0 || b.layer >= n_layer) b.layer = (data[1] >> 1) % n_layer;
  if (b.n_tokens == 0) b.n_tokens = 1;
  b.stream_end = b.token_begin + b.n_tokens + (data[6] & 0x7f);
  bool valid = false;
  const std::vector<float> rows = make_rows(b, rest, data[7], data[6] & 0x80, valid);
  absl::StatusOr<baton::EncodedKvBlock> enc =
      b.codec->encode(b.layer, b.is_key, b.token_begin, b.stream_end, rows.data(), b.n_tokens);
  if (!valid) {
    if (enc.ok() || enc.status().code() != absl::StatusCode::kInvalidArgument) fail("a bad value is not rejected");
    return;
  }
  if (!enc.ok()) {
    std::fprintf(stderr, "%s\n", enc.status().ToString().c_str());
    fail("encode of valid rows failed");
  }
  if (enc->raw_size != 2 * static_cast<uint64_t>(b.n_tokens) * static_cast<uint64_t>(b.codec->geometry().kv_dim())) {
    fail("encode's raw_size is not the F16 size");
  }
  const int64_t kv_dim = b.codec->geometry().kv_dim();
  std::vector<float> out(static_cast<size_t>(b.n_tokens * kv_dim), std::numeric_limits<float>::quiet_NaN());
  const absl::Status st =
      b.codec->decode(b.layer, b.is_key, b.token_begin, b.stream_end, enc->payload, enc->raw_size, b.n_tokens,
                      out.data());
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    fail("a block the encoder wrote does not decode");
  }
  for (float v : out) {
    if (!std::isfinite(v)) fail("a round trip decoded a non-finite (or unwritten) value");
  }
  if (enc->payload.empty()) return;
  std::string changed = enc->payload;
  changed[(static_cast<size_t>(data[7]) * 131 + rest.size()) % changed.size()] ^= static_cast<char>(data[7] | 1);
  check_decode(b, changed, enc->raw_size);
}

// ---- seeds ----

std::string header(int codec, bool round_trip_mode, int layer, bool is_key, int n_tokens, int token_begin, int slack,
                   uint8_t extra) {
  std::string h(kHeader, '\0');
  h[0] = static_cast<char>(codec);
  h[1] = static_cast<char>((round_trip_mode ? 0x80 : 0) | layer << 1 | (is_key ? 1 : 0));
  h[2] = static_cast<char>(n_tokens & 0xff);
  h[3] = static_cast<char>(n_tokens >> 8);
  h[4] = static_cast<char>(token_begin & 0xff);
  h[5] = static_cast<char>(token_begin >> 8);
  h[6] = static_cast<char>(slack);
  h[7] = static_cast<char>(extra);
  return h;
}

void write_seeds(const std::string& dir) {
  const Palette& p = palette();
  int written = 0;
  auto save = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    ++written;
  };
  // (codec, layer, is_key, n_tokens, token_begin, slack): sink + coded +
  // recent rows, coded rows only, INT8 rows only, one token, both back ends.
  struct Shape {
    int codec, layer;
    bool is_key;
    int n_tokens, token_begin, slack;
  };
  const Shape shapes[] = {{0, 0, true, 24, 0, 0},    {1, 1, false, 24, 0, 0},   {3, 1, true, 32, 8, 40},
                          {4, 0, false, 32, 8, 40},  {6, 0, true, 6, 100, 0},   {13, 1, false, 40, 0, 20},
                          {19, 1, true, 1, 50, 50},  {22, 0, true, 20, 0, 0},   {24, 0, true, 20, 0, 0},
                          {25, 0, false, 20, 2, 30}, {26, 1, true, 20, 0, 30}, {29, 1, false, 20, 0, 30},
                          {31, 0, false, 12, 0, 0},  {34, 1, true, 16, 4, 8}};
  for (const Shape& s : shapes) {
    const KvTransformCodec& codec = *p.codecs[static_cast<size_t>(s.codec) % p.codecs.size()];
    const std::vector<float> rows =
        baton::testing::synthetic_kv_rows(codec.calibration(), s.layer, s.is_key, s.n_tokens, 3);
    const int64_t begin = s.token_begin, end = s.token_begin + s.n_tokens + s.slack;
    absl::StatusOr<baton::EncodedKvBlock> enc = codec.encode(s.layer, s.is_key, begin, end, rows.data(), s.n_tokens);
    if (!enc.ok()) fail("a seed does not encode");
    const std::string bytes = header(s.codec, false, s.layer, s.is_key, s.n_tokens, s.token_begin, s.slack, 0);
    const Block b = read_header(reinterpret_cast<const uint8_t*>(bytes.data()));
    std::vector<float> out(rows.size());
    if (!b.codec->decode(b.layer, b.is_key, b.token_begin, b.stream_end, enc->payload, b.raw_size, b.n_tokens,
                         out.data()).ok()) {
      fail("a seed does not decode through its header");
    }
    save("block_" + std::to_string(written), bytes + enc->payload);
  }
  for (int i = 0; i < 4; ++i) {
    std::string bytes = header(i * 7, true, i & 1, i & 2, 8 + i * 5, i * 3, i * 9, static_cast<uint8_t>(i * 0x41));
    for (int j = 0; j < 64; ++j) bytes.push_back(static_cast<char>((j * 37 + i) & 0xff));
    save("round_trip_" + std::to_string(i), bytes);
  }
  std::fprintf(stderr, "kv_transform_fuzz: wrote %d seeds to %s\n", written, dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("BATON_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  palette();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  const Block b = read_header(data);
  const std::string_view rest(reinterpret_cast<const char*>(data + kHeader), size - kHeader);
  if (data[1] & 0x80) {
    round_trip(b, data, rest);
  } else {
    check_decode(b, rest, b.raw_size);
  }
  return 0;
}
