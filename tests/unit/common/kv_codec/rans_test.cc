// The rANS coder (rans.h): models built from weights, round trips over table
// shapes (constant columns mixed in, rows not a multiple of the lanes, no
// rows), the coded size against the models' ideal cost, a pinned stream (the
// wire format), and hostile input: every truncation, a trailing byte, byte
// flips, bad states and bad arguments give InvalidArgument, never a crash.
#include "common/kv_codec/rans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace baton {
namespace {

constexpr int kScale = 1 << kRansProbBits;

// Weights of a discretized Gaussian over n symbols centred in the middle.
std::vector<double> gaussian_weights(int n, double sigma_in_symbols) {
  std::vector<double> w(n);
  for (int s = 0; s < n; ++s) {
    const double z = (s - (n - 1) / 2.0) / sigma_in_symbols;
    w[s] = std::exp(-0.5 * z * z);
  }
  return w;
}

// Bits per symbol of coding weights `w` with model `m`, and their entropy.
double cross_entropy(const std::vector<double>& w, const RansModel& m) {
  double total = 0.0, bits = 0.0;
  for (double v : w) total += v;
  for (size_t s = 0; s < w.size(); ++s) bits += w[s] / total * (kRansProbBits - std::log2(m.freq[s]));
  return bits;
}
double entropy(const std::vector<double>& w) {
  double total = 0.0, bits = 0.0;
  for (double v : w) total += v;
  for (double v : w) bits -= v > 0 ? v / total * std::log2(v / total) : 0.0;
  return bits;
}

void expect_consistent(const RansModel& m, int n) {
  ASSERT_EQ(m.n_symbols(), n);
  ASSERT_EQ(m.cum.size(), static_cast<size_t>(n + 1));
  ASSERT_EQ(m.slot_symbol.size(), static_cast<size_t>(kScale));
  EXPECT_EQ(m.cum[0], 0);
  EXPECT_EQ(m.cum[n], kScale);
  for (int s = 0; s < n; ++s) {
    EXPECT_GE(m.freq[s], 1) << "symbol " << s;
    EXPECT_EQ(m.cum[s + 1], m.cum[s] + m.freq[s]);
    for (int slot = m.cum[s]; slot < m.cum[s + 1]; ++slot) ASSERT_EQ(m.slot_symbol[slot], s) << "slot " << slot;
  }
}

// A model from random weights: n symbols, some weights zero, some tiny.
RansModel random_model(int n, std::mt19937& rng) {
  std::vector<double> w(n);
  std::exponential_distribution<double> expo(1.0);
  for (double& v : w) {
    const unsigned kind = rng() % 8;
    v = kind == 0 ? 0.0 : kind == 1 ? 1e-9 * expo(rng) : expo(rng);
  }
  if (n > 1) w[rng() % n] += 1.0;  // never all zero
  return *make_rans_model(w);
}

// n_rows x models.size() symbols drawn from the models' own distributions.
std::vector<uint8_t> sample_table(int64_t n_rows, const std::vector<const RansModel*>& models, std::mt19937& rng) {
  const size_t n_cols = models.size();
  std::vector<uint8_t> t(static_cast<size_t>(n_rows) * n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (size_t c = 0; c < n_cols; ++c) t[r * n_cols + c] = models[c]->slot_symbol.empty()
                                                                ? 0
                                                                : models[c]->slot_symbol[rng() % kScale];
  }
  return t;
}

struct Table {
  std::vector<RansModel> owned;
  std::vector<const RansModel*> models;
  std::vector<uint8_t> symbols;
  int64_t n_rows = 0;
  int n_cols() const { return static_cast<int>(models.size()); }
};

// Gaussian models of 3..40 symbols per column, every fourth column constant
// when `with_constants`.
Table gaussian_table(int64_t n_rows, int n_cols, bool with_constants, unsigned seed) {
  std::mt19937 rng(seed);
  Table t;
  t.n_rows = n_rows;
  t.owned.reserve(n_cols);
  for (int c = 0; c < n_cols; ++c) {
    const int n = with_constants && c % 4 == 1 ? 1 : 3 + static_cast<int>(rng() % 38);
    t.owned.push_back(*make_rans_model(gaussian_weights(n, 0.5 + n / 6.0)));
  }
  for (const RansModel& m : t.owned) t.models.push_back(&m);
  t.symbols = sample_table(n_rows, t.models, rng);
  return t;
}

std::string encode(const Table& t) {
  absl::StatusOr<std::string> enc = rans_encode(t.symbols.data(), t.n_rows, t.n_cols(), t.models);
  EXPECT_TRUE(enc.ok()) << enc.status();
  return enc.ok() ? *enc : std::string();
}

absl::Status decode(const Table& t, std::string_view bytes, std::vector<uint8_t>* out) {
  out->assign(t.symbols.size(), 0xAB);
  return rans_decode(bytes, t.n_rows, t.n_cols(), t.models, out->data());
}

TEST(RansModel, FrequenciesSumToScaleEverySymbolAtLeastOne) {
  std::mt19937 rng(1);
  for (int n : {1, 2, 3, 17, 40, 255, 256}) {
    for (int trial = 0; trial < 5; ++trial) {
      const RansModel m = random_model(n, rng);
      SCOPED_TRACE("n=" + std::to_string(n));
      expect_consistent(m, n);
    }
  }
}

TEST(RansModel, TinyAndZeroWeightsStillCodable) {
  std::vector<double> w(256, 0.0);
  w[7] = 1.0;
  const RansModel m = *make_rans_model(w);
  expect_consistent(m, 256);
  EXPECT_EQ(m.freq[7], kScale - 255);
}

// Within 1% of the entropy, plus what the floor of one slot per symbol must
// cost: the n - 1 rare symbols take up to (n - 1) / 4096 of the probability
// from the likely ones (log2(e) * (n - 1) / 4096 bits).
TEST(RansModel, GaussianCostWithinOnePercentOfEntropy) {
  for (int n = 3; n <= 40; ++n) {
    for (double sigma : {0.4, 1.0, n / 6.0}) {
      const std::vector<double> w = gaussian_weights(n, sigma);
      const RansModel m = *make_rans_model(w);
      const double h = entropy(w), ce = cross_entropy(w, m);
      EXPECT_LE(ce, h * 1.01 + 1.4427 * (n - 1) / kScale) << "n=" << n << " sigma=" << sigma;
    }
  }
}

TEST(RansModel, NoSingleSlotMoveLowersTheCost) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 60);
    std::vector<double> w(n);
    std::exponential_distribution<double> expo(1.0);
    for (double& v : w) v = std::pow(expo(rng), 3.0);
    const RansModel m = *make_rans_model(w);
    double total = 0.0;
    for (double v : w) total += v;
    for (int i = 0; i < n; ++i) {
      if (m.freq[i] <= 1) continue;
      const double loss = w[i] / total * std::log2(double(m.freq[i]) / (m.freq[i] - 1));
      for (int j = 0; j < n; ++j) {
        if (j == i) continue;
        const double gain = w[j] / total * std::log2(double(m.freq[j] + 1) / m.freq[j]);
        EXPECT_LE(gain, loss + 1e-9) << "moving a slot from " << i << " to " << j << " pays";
      }
    }
  }
}

TEST(RansModel, RejectsBadWeights) {
  EXPECT_FALSE(make_rans_model(std::vector<double>{}).ok());
  EXPECT_FALSE(make_rans_model(std::vector<double>(257, 1.0)).ok());
  EXPECT_FALSE(make_rans_model(std::vector<double>{1.0, -0.5}).ok());
  EXPECT_FALSE(make_rans_model(std::vector<double>{1.0, NAN}).ok());
  EXPECT_FALSE(make_rans_model(std::vector<double>{1.0, INFINITY}).ok());
  EXPECT_FALSE(make_rans_model(std::vector<double>{1e308, 1e308}).ok());  // the sum overflows
  EXPECT_FALSE(make_rans_model(std::vector<double>{0.0, 0.0}).ok());
  // One symbol: constant whatever its weight.
  absl::StatusOr<RansModel> one = make_rans_model(std::vector<double>{0.0});
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->constant());
}

struct Shape {
  int64_t n_rows;
  int n_cols;
  bool with_constants;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.n_rows << " x " << s.n_cols << (s.with_constants ? " with constant columns" : "");
}

class RansRoundTrip : public testing::TestWithParam<Shape> {};

TEST_P(RansRoundTrip, DecodesWhatWasEncoded) {
  const Shape s = GetParam();
  const Table t = gaussian_table(s.n_rows, s.n_cols, s.with_constants, 11 + s.n_cols);
  const std::string enc = encode(t);
  std::vector<uint8_t> out;
  ASSERT_TRUE(decode(t, enc, &out).ok());
  EXPECT_EQ(out, t.symbols);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RansRoundTrip,
                         testing::Values(Shape{0, 1, false}, Shape{0, 64, true}, Shape{1, 1, false},
                                         Shape{7, 1, false}, Shape{1000, 1, false}, Shape{13, 3, false},
                                         Shape{255, 64, false}, Shape{256, 64, true}, Shape{333, 7, true},
                                         Shape{4096, 64, true}, Shape{50, 1000, true}),
                         [](const testing::TestParamInfo<Shape>& shape) {
                           return "rows" + std::to_string(shape.param.n_rows) + "_cols" +
                                  std::to_string(shape.param.n_cols) + (shape.param.with_constants ? "_const" : "");
                         });

TEST(Rans, RandomModelsAndUniformSymbolsRoundTrip) {
  // Uniform symbols over skewed models: many frequency-1 symbols, the
  // two-byte renormalizations, every lane and column count.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 60; ++trial) {
    Table t;
    const int n_cols = 1 + static_cast<int>(rng() % 20);
    t.n_rows = rng() % 300;
    for (int c = 0; c < n_cols; ++c) t.owned.push_back(random_model(1 + static_cast<int>(rng() % 256), rng));
    for (const RansModel& m : t.owned) t.models.push_back(&m);
    t.symbols.resize(static_cast<size_t>(t.n_rows) * n_cols);
    for (int64_t r = 0; r < t.n_rows; ++r) {
      for (int c = 0; c < n_cols; ++c) t.symbols[r * n_cols + c] = static_cast<uint8_t>(rng() % t.owned[c].n_symbols());
    }
    const std::string enc = encode(t);
    std::vector<uint8_t> out;
    ASSERT_TRUE(decode(t, enc, &out).ok()) << "trial " << trial;
    ASSERT_EQ(out, t.symbols) << "trial " << trial;
  }
}

// Every subset of 5 columns constant (the decoder writes the coded columns
// contiguously and spreads them in place afterwards).
TEST(Rans, ConstantColumnsAnywhere) {
  std::mt19937 rng(4);
  const RansModel constant = *make_rans_model(std::vector<double>{1.0});
  const RansModel coded = *make_rans_model(gaussian_weights(11, 2.0));
  for (unsigned mask = 0; mask < 32; ++mask) {
    Table t;
    t.n_rows = 37;
    for (int c = 0; c < 5; ++c) t.models.push_back(mask >> c & 1 ? &constant : &coded);
    t.symbols = sample_table(t.n_rows, t.models, rng);
    std::vector<uint8_t> out;
    ASSERT_TRUE(decode(t, encode(t), &out).ok()) << "mask " << mask;
    ASSERT_EQ(out, t.symbols) << "mask " << mask;
  }
}

// The extremes of the frequency range: 4095 (the largest reciprocal) and 1
// (12 bits, two renormalization bytes; the reciprocal's special case).
TEST(Rans, ExtremeFrequenciesRoundTrip) {
  const RansModel m = *make_rans_model(std::vector<double>{1e9, 1.0});
  ASSERT_EQ(m.freq[0], kScale - 1);
  ASSERT_EQ(m.freq[1], 1);
  for (int pattern = 0; pattern < 3; ++pattern) {
    Table t;
    t.n_rows = 1001;
    t.models = {&m, &m, &m};
    t.symbols.resize(3 * 1001);
    for (size_t i = 0; i < t.symbols.size(); ++i) {
      t.symbols[i] = pattern == 0 ? 1 : pattern == 1 ? 0 : static_cast<uint8_t>(i % 7 == 0);
    }
    std::vector<uint8_t> out;
    ASSERT_TRUE(decode(t, encode(t), &out).ok()) << "pattern " << pattern;
    ASSERT_EQ(out, t.symbols) << "pattern " << pattern;
  }
}

TEST(Rans, AllConstantOrNoRowsIsTheHeaderOnly) {
  const RansModel constant = *make_rans_model(std::vector<double>{1.0});
  const std::vector<const RansModel*> models(5, &constant);
  const std::vector<uint8_t> zeros(100 * 5, 0);
  absl::StatusOr<std::string> enc = rans_encode(zeros.data(), 100, 5, models);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->size(), 4u * kRansLanes);
  std::vector<uint8_t> out(zeros.size(), 9);
  ASSERT_TRUE(rans_decode(*enc, 100, 5, models, out.data()).ok());
  EXPECT_EQ(out, zeros);
}

TEST(Rans, SizeWithinOnePercentOfIdeal) {
  const Table t = gaussian_table(4096, 64, true, 5);
  const std::string enc = encode(t);
  const double ideal_bytes = rans_ideal_bits(t.symbols.data(), t.n_rows, t.n_cols(), t.models) / 8.0;
  EXPECT_LE(static_cast<double>(enc.size()), ideal_bytes * 1.01 + 4 * kRansLanes);
  EXPECT_GE(static_cast<double>(enc.size()), ideal_bytes * 0.99);
}

TEST(Rans, IdealBitsCountEachSymbol) {
  const RansModel m = *make_rans_model(std::vector<double>{3.0, 1.0});  // 3072 / 1024 slots
  const RansModel constant = *make_rans_model(std::vector<double>{1.0});
  const std::vector<const RansModel*> models{&m, &constant};
  const std::vector<uint8_t> symbols{0, 0, 1, 0, 1, 0};
  EXPECT_NEAR(rans_ideal_bits(symbols.data(), 3, 2, models), std::log2(4.0 / 3.0) + 2 * 2.0, 1e-12);
}

// The wire format both ends must agree on: a change here is a protocol change.
// The bytes were checked against a plain-division rANS written from rans.h's
// format description (Python, frequencies 410/819/1638/819/410).
TEST(Rans, PinnedStream) {
  const RansModel m = *make_rans_model(std::vector<double>{1, 2, 4, 2, 1});
  const RansModel constant = *make_rans_model(std::vector<double>{1.0});
  const std::vector<const RansModel*> models{&m, &constant, &m};
  std::vector<uint8_t> symbols;
  for (int r = 0; r < 11; ++r) symbols.insert(symbols.end(), {static_cast<uint8_t>(r % 5), 0, static_cast<uint8_t>((r * 3) % 5)});
  absl::StatusOr<std::string> enc = rans_encode(symbols.data(), 11, 3, models);
  ASSERT_TRUE(enc.ok());
  std::string hex;
  for (unsigned char ch : *enc) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", ch);
    hex += b;
  }
  EXPECT_EQ(hex, "8490f9004fa1ca7caf92f900c4ac783e2d16783efa52f07c03dc4006862efb1883a4");
}

TEST(Rans, EveryTruncationFails) {
  const Table t = gaussian_table(150, 5, true, 6);
  const std::string enc = encode(t);
  std::vector<uint8_t> out;
  for (size_t len = 0; len < enc.size(); ++len) {
    const absl::Status st = decode(t, std::string_view(enc).substr(0, len), &out);
    ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "length " << len << " of " << enc.size();
  }
}

TEST(Rans, TrailingByteFails) {
  const Table t = gaussian_table(150, 5, true, 7);
  std::vector<uint8_t> out;
  for (char extra : {'\0', '\x5a'}) {
    const absl::Status st = decode(t, encode(t) + extra, &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("trailing"), std::string_view::npos) << st;
  }
}

TEST(Rans, ByteFlipsNeverCrashAndMostlyFail) {
  const Table t = gaussian_table(200, 16, true, 8);
  const std::string enc = encode(t);
  std::mt19937 rng(9);
  std::vector<uint8_t> out;
  int accepted = 0;
  constexpr int kTrials = 3000;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::string bad = enc;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    const absl::Status st = decode(t, bad, &out);
    if (st.ok()) {
      // The coder is a bijection: whatever decodes must re-encode to the same bytes.
      ++accepted;
      absl::StatusOr<std::string> again = rans_encode(out.data(), t.n_rows, t.n_cols(), t.models);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, bad);
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_LE(accepted, kTrials / 100);
}

TEST(Rans, StatesOutsideTheEncoderRangeFail) {
  const Table t = gaussian_table(20, 3, false, 10);
  std::vector<uint8_t> out;
  for (uint32_t state : {0u, (1u << 23) - 1, 1u << 31, ~0u}) {
    std::string bad = encode(t);
    for (int b = 0; b < 4; ++b) bad[4 * 3 + b] = static_cast<char>(state >> (8 * b));  // lane 3
    const absl::Status st = decode(t, bad, &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  EXPECT_FALSE(decode(t, std::string_view(), &out).ok());
}

TEST(Rans, OtherModelsFail) {
  const Table t = gaussian_table(300, 8, false, 12);
  const Table other = gaussian_table(300, 8, false, 13);
  std::vector<uint8_t> out(t.symbols.size());
  EXPECT_FALSE(rans_decode(encode(t), t.n_rows, t.n_cols(), other.models, out.data()).ok());
}

TEST(Rans, SymbolOutsideItsModelIsRejected) {
  const RansModel m = *make_rans_model(std::vector<double>{1, 1, 1});
  const RansModel constant = *make_rans_model(std::vector<double>{1.0});
  const std::vector<const RansModel*> models{&m, &constant};
  const std::vector<uint8_t> over{0, 0, 3, 0};
  EXPECT_EQ(rans_encode(over.data(), 2, 2, models).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint8_t> nonzero_constant{0, 0, 2, 1};
  EXPECT_EQ(rans_encode(nonzero_constant.data(), 2, 2, models).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Rans, BadShapesAndModelsAreRejected) {
  const RansModel m = *make_rans_model(std::vector<double>{1, 1, 1});
  const std::vector<uint8_t> symbols(16, 0);
  uint8_t out[16];
  const std::string header(4 * kRansLanes, '\0');
  auto both_fail = [&](int64_t n_rows, int n_cols, std::vector<const RansModel*> models) {
    EXPECT_EQ(rans_encode(symbols.data(), n_rows, n_cols, models).status().code(), absl::StatusCode::kInvalidArgument)
        << n_rows << " x " << n_cols;
    EXPECT_EQ(rans_decode(header, n_rows, n_cols, models, out).code(), absl::StatusCode::kInvalidArgument)
        << n_rows << " x " << n_cols;
  };
  both_fail(-1, 1, {&m});
  both_fail((int64_t{1} << 20) + 1, 1, {&m});
  both_fail(1, 0, {});
  both_fail(1, 65537, std::vector<const RansModel*>(65537, &m));
  both_fail(int64_t{1} << 20, 65536, std::vector<const RansModel*>(65536, &m));  // capped before allocating
  both_fail(1, 2, {&m});                                                       // one model short
  both_fail(1, 1, {nullptr});
  RansModel broken = m;
  broken.cum.pop_back();
  both_fail(1, 1, {&broken});
  broken = m;
  broken.slot_symbol.resize(100);
  both_fail(1, 1, {&broken});
}

}  // namespace
}  // namespace baton
