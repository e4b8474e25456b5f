// The KV calibration: the Jacobi eigen-solver on known matrices, the builder
// recovering a known covariance, the .batoncal bytes (round trip,
// determinism, digest) and every way parse() refuses a bad file.
#include "common/kv_codec/kv_calibration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/kv_codec/symmetric_eigen.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// ---- symmetric_eigen ----

// Row i of `vectors` ([n * n]) dotted with row j.
double row_dot(const std::vector<double>& vectors, int n, int i, int j) {
  double sum = 0.0;
  for (int k = 0; k < n; ++k) sum += vectors[static_cast<size_t>(i) * n + k] * vectors[static_cast<size_t>(j) * n + k];
  return sum;
}

void expect_orthonormal(const std::vector<double>& vectors, int n, double tolerance) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) ASSERT_NEAR(row_dot(vectors, n, i, j), i == j ? 1.0 : 0.0, tolerance) << i << "," << j;
  }
}

// B^T diag(values) B, the matrix the decomposition stands for.
std::vector<double> reconstruct(const SymmetricEigen& e, int n) {
  std::vector<double> c(static_cast<size_t>(n) * n, 0.0);
  for (int r = 0; r < n; ++r) {
    const double* b = e.vectors.data() + static_cast<size_t>(r) * n;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) c[static_cast<size_t>(i) * n + j] += e.values[static_cast<size_t>(r)] * b[i] * b[j];
    }
  }
  return c;
}

// M M^T + I for a seeded normal M: symmetric positive definite.
std::vector<double> random_spd(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> m(static_cast<size_t>(n) * n);
  for (double& v : m) v = normal(rng);
  std::vector<double> c(m.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = i == j ? 1.0 : 0.0;
      for (int k = 0; k < n; ++k) sum += m[static_cast<size_t>(i) * n + k] * m[static_cast<size_t>(j) * n + k];
      c[static_cast<size_t>(i) * n + j] = sum;
    }
  }
  return c;
}

TEST(SymmetricEigen, DiagonalMatrixGivesItsEntriesDescendingAndUnitVectors) {
  const std::vector<double> diagonal = {1, 0, 0, 0, 5, 0, 0, 0, 3};
  absl::StatusOr<SymmetricEigen> e = symmetric_eigen(diagonal, 3);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->values, (std::vector<double>{5, 3, 1}));
  EXPECT_EQ(e->vectors, (std::vector<double>{0, 1, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(e->sweeps, 0);
}

TEST(SymmetricEigen, RandomSpdMatrixIsReconstructedByOrthonormalVectors) {
  for (const int n : {2, 7, 64, 256}) {
    const std::vector<double> c = random_spd(n, 17u + static_cast<uint32_t>(n));
    absl::StatusOr<SymmetricEigen> e = symmetric_eigen(c, n);
    ASSERT_TRUE(e.ok()) << e.status();
    expect_orthonormal(e->vectors, n, 1e-9);
    for (int i = 1; i < n; ++i) EXPECT_GE(e->values[i - 1], e->values[i]);
    EXPECT_GE(e->values.back(), 1.0 - 1e-9);  // M M^T + I
    const std::vector<double> back = reconstruct(*e, n);
    for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(back[i], c[i], 1e-6) << "n " << n << " entry " << i;
  }
}

TEST(SymmetricEigen, EachVectorsLargestEntryIsPositiveAndTheResultIsDeterministic) {
  const int n = 12;
  const std::vector<double> c = random_spd(n, 5);
  absl::StatusOr<SymmetricEigen> a = symmetric_eigen(c, n);
  absl::StatusOr<SymmetricEigen> b = symmetric_eigen(c, n);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->values, b->values);
  EXPECT_EQ(a->vectors, b->vectors);
  for (int r = 0; r < n; ++r) {
    const double* row = a->vectors.data() + static_cast<size_t>(r) * n;
    int largest = 0;
    for (int k = 1; k < n; ++k) {
      if (std::fabs(row[k]) > std::fabs(row[largest])) largest = k;
    }
    EXPECT_GT(row[largest], 0.0) << "row " << r;
  }
}

TEST(SymmetricEigen, RepeatedAndZeroEigenvaluesStillGiveAnOrthonormalBasis) {
  // Rank 2 with a double eigenvalue: x x^T + y y^T for orthogonal x, y of equal norm.
  const int n = 4;
  const std::vector<double> x = {1, 1, 0, 0}, y = {0, 0, 1, 1};
  std::vector<double> c(n * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) c[i * n + j] = x[i] * x[j] + y[i] * y[j];
  }
  absl::StatusOr<SymmetricEigen> e = symmetric_eigen(c, n);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_NEAR(e->values[0], 2.0, 1e-12);
  EXPECT_NEAR(e->values[1], 2.0, 1e-12);
  EXPECT_NEAR(e->values[2], 0.0, 1e-12);
  EXPECT_NEAR(e->values[3], 0.0, 1e-12);
  expect_orthonormal(e->vectors, n, 1e-12);
}

TEST(SymmetricEigen, RejectsAWrongSizeAndNonFiniteEntries) {
  EXPECT_EQ(symmetric_eigen(std::vector<double>(5), 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(symmetric_eigen(std::vector<double>(), 0).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<double> c = {1, std::nan(""), 0, 1};
  absl::Status st = symmetric_eigen(c, 2).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("(0, 1)"));
}

// ---- the builder ----

// A seeded random orthonormal basis ([d * d], rows) by Gram-Schmidt.
std::vector<double> random_basis(int d, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> q(static_cast<size_t>(d) * d);
  for (int i = 0; i < d; ++i) {
    double* row = q.data() + static_cast<size_t>(i) * d;
    for (int k = 0; k < d; ++k) row[k] = normal(rng);
    for (int j = 0; j < i; ++j) {
      const double* prev = q.data() + static_cast<size_t>(j) * d;
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += row[k] * prev[k];
      for (int k = 0; k < d; ++k) row[k] -= dot * prev[k];
    }
    double norm = 0.0;
    for (int k = 0; k < d; ++k) norm += row[k] * row[k];
    for (int k = 0; k < d; ++k) row[k] /= std::sqrt(norm);
  }
  return q;
}

// n_tokens rows of a layer: per head, mean + sum_i sqrt(variance_i) g_i q_i
// with g_i ~ N(0, 1).
struct SyntheticHead {
  std::vector<double> mean, basis, variance;
};

std::vector<float> synthetic_rows(const std::vector<SyntheticHead>& heads, int d, int64_t n_tokens,
                                  std::mt19937& rng) {
  std::normal_distribution<double> normal;
  const size_t kv_dim = heads.size() * static_cast<size_t>(d);
  std::vector<float> rows(static_cast<size_t>(n_tokens) * kv_dim);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < heads.size(); ++h) {
      std::vector<double> x = heads[h].mean;
      for (int i = 0; i < d; ++i) {
        const double g = normal(rng) * std::sqrt(heads[h].variance[static_cast<size_t>(i)]);
        for (int k = 0; k < d; ++k) x[static_cast<size_t>(k)] += g * heads[h].basis[static_cast<size_t>(i) * d + k];
      }
      float* out = rows.data() + static_cast<size_t>(t) * kv_dim + h * d;
      for (size_t k = 0; k < static_cast<size_t>(d); ++k) out[k] = static_cast<float>(x[k]);
    }
  }
  return rows;
}

class KvCalibrationBuilderTest : public ::testing::Test {
 protected:
  static constexpr int kD = 16;
  static constexpr int64_t kTokens = 20000;
  const KvGeometry geometry_{2, 4, 2, kD, {}};

  void SetUp() override {
    std::mt19937 rng(7);
    std::normal_distribution<double> normal;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<SyntheticHead> heads(static_cast<size_t>(geometry_.n_head_kv));
        for (SyntheticHead& h : heads) {
          h.basis = random_basis(kD, rng);
          h.mean.resize(kD);
          for (double& m : h.mean) m = 3.0 * normal(rng);
          for (int i = 0; i < kD; ++i) h.variance.push_back(4.0 * std::pow(0.6, i));
        }
        rows_.push_back(synthetic_rows(heads, kD, kTokens, rng));
        truth_.push_back(std::move(heads));
      }
    }
  }

  KvCalibrationBuilder filled_builder() const {
    KvCalibrationBuilder builder(geometry_, "model-digest");
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      for (const bool is_key : {true, false}) {
        const std::vector<float>& rows = rows_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))];
        // In two calls, as chunks arrive.
        EXPECT_TRUE(builder.add(layer, is_key, rows.data(), kTokens / 2).ok());
        EXPECT_TRUE(builder.add(layer, is_key, rows.data() + kTokens / 2 * geometry_.kv_dim(), kTokens / 2).ok());
      }
    }
    return builder;
  }

  std::vector<std::vector<float>> rows_;                // [layer * 2 + kind]: [kTokens, kv_dim]
  std::vector<std::vector<SyntheticHead>> truth_;       // [layer * 2 + kind][head]
};

TEST_F(KvCalibrationBuilderTest, RecoversTheKnownMeanVariancesAndDirections) {
  absl::StatusOr<KvCalibration> c = filled_builder().finish("synthetic");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tokens, kTokens);
  EXPECT_EQ(c->source, "synthetic");
  EXPECT_EQ(c->model_digest, "model-digest");
  EXPECT_TRUE(c->pre_rope_keys);
  EXPECT_TRUE(c->check_geometry(geometry_).ok());
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      for (int head = 0; head < geometry_.n_head_kv; ++head) {
        const SyntheticHead& want = truth_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))][head];
        const KvCalibrationHead& got = c->head(layer, is_key, head);
        for (int i = 0; i < kD; ++i) {
          EXPECT_NEAR(got.mean[i], want.mean[i], 0.05) << "mean " << i;
          EXPECT_NEAR(got.variance[i] / want.variance[i], 1.0, 0.05) << "variance " << i;
        }
        for (int i = 0; i < 4; ++i) {  // the top components, up to sign
          double dot = 0.0;
          for (int k = 0; k < kD; ++k) dot += got.basis[i * kD + k] * want.basis[i * kD + k];
          EXPECT_GT(std::fabs(dot), 0.99) << "layer " << layer << " head " << head << " component " << i;
        }
      }
    }
  }
}

TEST_F(KvCalibrationBuilderTest, ShapesAreTheStandardNormalForGaussianData) {
  absl::StatusOr<KvCalibration> c = filled_builder().finish("synthetic");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->shape.size(), 4u);
  for (const std::vector<float>& shape : c->shape) {
    ASSERT_EQ(shape.size(), static_cast<size_t>(kKvShapeBins));
    double sum = 0.0, within_one = 0.0;
    for (int b = 0; b < kKvShapeBins; ++b) {
      sum += shape[b];
      if (b >= kKvShapeBins / 2 - 16 && b < kKvShapeBins / 2 + 16) within_one += shape[b];  // z in [-1, 1)
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_NEAR(within_one, 0.6827, 0.01);
    EXPECT_EQ(shape.front(), 0.0f);  // nothing at |z| >= 16 for Gaussian data
  }
}

TEST_F(KvCalibrationBuilderTest, TheSameDataGivesTheSameBytes) {
  absl::StatusOr<KvCalibration> a = filled_builder().finish("synthetic");
  absl::StatusOr<KvCalibration> b = filled_builder().finish("synthetic");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(serialize_kv_calibration(*a), serialize_kv_calibration(*b));
}

TEST_F(KvCalibrationBuilderTest, AddRefusesABadLayerAndNonFiniteValues) {
  KvCalibrationBuilder builder(geometry_, "m");
  const std::vector<float>& rows = rows_[0];
  EXPECT_THAT(builder.add(2, true, rows.data(), 1).message(), HasSubstr("layer 2"));
  EXPECT_EQ(builder.add(-1, true, rows.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(builder.add(0, true, nullptr, 3).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> bad(rows.begin(), rows.begin() + geometry_.kv_dim());
  bad[5] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(builder.add(0, false, bad.data(), 1).message(), HasSubstr("column 5"));
  KvCalibrationBuilder oversize(KvGeometry{1, 1, 1, 2000, {}}, "m");
  EXPECT_THAT(oversize.add(0, true, rows.data(), 0).message(), HasSubstr("head_dim 2000"));
}

TEST_F(KvCalibrationBuilderTest, FinishNeedsHeadDimTokensInEveryLayerAndKind) {
  KvCalibrationBuilder few(geometry_, "m");
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) ASSERT_TRUE(few.add(layer, is_key, rows_[0].data(), kD - 1).ok());
  }
  EXPECT_EQ(few.finish("x").status().code(), absl::StatusCode::kFailedPrecondition);
  KvCalibrationBuilder uneven(geometry_, "m");
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      ASSERT_TRUE(uneven.add(layer, is_key, rows_[0].data(), layer == 1 && !is_key ? kD + 1 : kD).ok());
    }
  }
  absl::Status st = uneven.finish("x").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("layer 1 V"));
}

TEST(KvCalibrationBuilder, ConstantHeadsGiveZeroVarianceAndAShapeAtZero) {
  const KvGeometry g{1, 1, 1, 4, {}};
  KvCalibrationBuilder builder(g, "m");
  const std::vector<float> rows(4 * 10, 2.5f);
  ASSERT_TRUE(builder.add(0, true, rows.data(), 10).ok());
  ASSERT_TRUE(builder.add(0, false, rows.data(), 10).ok());
  absl::StatusOr<KvCalibration> c = builder.finish("constant");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head(0, true, 0).variance, std::vector<float>(4, 0.0f));
  EXPECT_EQ(c->head(0, true, 0).mean, std::vector<float>(4, 2.5f));
  EXPECT_EQ(c->shape_of(0, true)[kKvShapeBins / 2], 1.0f);
  EXPECT_TRUE(parse_kv_calibration(serialize_kv_calibration(*c)).ok());
}

// ---- the file ----

// 1 layer, 1 KV head, head_dim 4: identity basis, descending variances, a
// uniform shape.
KvCalibration small_calibration() {
  KvCalibration c;
  c.model_digest = "abc123";
  c.n_layer = 1;
  c.n_head_kv = 1;
  c.head_dim = 4;
  c.tokens = 99;
  c.source = "chapter.txt";
  for (int kind = 0; kind < 2; ++kind) {
    KvCalibrationHead h;
    h.mean = {0.5f, -1.0f, 2.0f, 0.0f};
    h.variance = {4.0f, 2.0f, 1.0f, 0.0f};
    h.basis.assign(16, 0.0f);
    for (int i = 0; i < 4; ++i) h.basis[static_cast<size_t>(i * 5)] = 1.0f;
    c.heads.push_back(h);
    c.shape.push_back(std::vector<float>(kKvShapeBins, 1.0f / kKvShapeBins));
  }
  return c;
}

// Byte offsets in small_calibration()'s file.
constexpr size_t kVersionAt = 8;
constexpr size_t kDigestLengthAt = 12;
constexpr size_t kNLayerAt = 16 + 6;          // after "abc123"
constexpr size_t kNHeadKvAt = kNLayerAt + 4;
constexpr size_t kHeadDimAt = kNLayerAt + 8;
constexpr size_t kPreRopeAt = kNLayerAt + 12;
constexpr size_t kSourceLengthAt = kPreRopeAt + 1 + 8;
constexpr size_t kArraysAt = kSourceLengthAt + 4 + 11 + 4;  // "chapter.txt", shape bins
// Within one head: mean[4], variance[4], basis[16].
constexpr size_t kVarianceAt = kArraysAt + 4 * 4;
constexpr size_t kBasisAt = kVarianceAt + 4 * 4;
constexpr size_t kShapeAt = kArraysAt + 2 * 24 * 4;

void put_u32(std::string& bytes, size_t at, uint32_t v) { std::memcpy(bytes.data() + at, &v, 4); }
void put_f32(std::string& bytes, size_t at, float v) { std::memcpy(bytes.data() + at, &v, 4); }

absl::Status parse_status(const std::string& bytes) { return parse_kv_calibration(bytes).status(); }

TEST(KvCalibrationFile, RoundTripsEveryFieldWithTheSameBytes) {
  const KvCalibration c = small_calibration();
  const std::string bytes = serialize_kv_calibration(c);
  ASSERT_EQ(bytes.size(), kShapeAt + 2 * kKvShapeBins * 4);
  EXPECT_EQ(bytes.substr(0, 8), "BATONCAL");
  absl::StatusOr<KvCalibration> back = parse_kv_calibration(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model_digest, c.model_digest);
  EXPECT_EQ(back->n_layer, 1);
  EXPECT_EQ(back->n_head_kv, 1);
  EXPECT_EQ(back->head_dim, 4);
  EXPECT_TRUE(back->pre_rope_keys);
  EXPECT_EQ(back->tokens, 99);
  EXPECT_EQ(back->source, c.source);
  for (const bool is_key : {true, false}) {
    EXPECT_EQ(back->head(0, is_key, 0).mean, c.head(0, is_key, 0).mean);
    EXPECT_EQ(back->head(0, is_key, 0).variance, c.head(0, is_key, 0).variance);
    EXPECT_EQ(back->head(0, is_key, 0).basis, c.head(0, is_key, 0).basis);
    EXPECT_EQ(back->shape_of(0, is_key), c.shape_of(0, is_key));
  }
  EXPECT_EQ(serialize_kv_calibration(*back), bytes);
  EXPECT_EQ(kv_calibration_digest(*back), kv_calibration_digest(c));
}

TEST(KvCalibrationFile, TheDigestChangesWithOneFloatAndWithTheHeader) {
  const KvCalibration c = small_calibration();
  KvCalibration mean_changed = c;
  mean_changed.heads[1].mean[3] = std::nextafter(0.0f, 1.0f);
  EXPECT_NE(kv_calibration_digest(mean_changed), kv_calibration_digest(c));
  KvCalibration post_rope = c;
  post_rope.pre_rope_keys = false;
  EXPECT_NE(kv_calibration_digest(post_rope), kv_calibration_digest(c));
  EXPECT_TRUE(parse_kv_calibration(serialize_kv_calibration(post_rope)).ok());
}

TEST(KvCalibrationFile, CheckGeometryNamesTheFieldThatDiffers) {
  const KvCalibration c = small_calibration();
  EXPECT_TRUE(c.check_geometry(KvGeometry{1, 8, 1, 4, {}}).ok());
  EXPECT_THAT(c.check_geometry(KvGeometry{2, 8, 1, 4, {}}).message(), HasSubstr("n_layer"));
  EXPECT_THAT(c.check_geometry(KvGeometry{1, 8, 2, 4, {}}).message(), HasSubstr("n_head_kv"));
  EXPECT_THAT(c.check_geometry(KvGeometry{1, 8, 1, 8, {}}).message(),
              HasSubstr("head_dim 4 but the model has head_dim 8"));
}

TEST(KvCalibrationFile, RefusesAWrongMagicAndVersion) {
  std::string bytes = serialize_kv_calibration(small_calibration());
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(parse_status(magic).message(), HasSubstr("magic"));
  std::string version = bytes;
  put_u32(version, kVersionAt, 3);
  EXPECT_THAT(parse_status(version).message(), HasSubstr("version 3"));
  // Version 2 promises a quality table after the arrays: a file without one is truncated.
  std::string no_table = bytes;
  put_u32(no_table, kVersionAt, 2);
  EXPECT_THAT(parse_status(no_table).message(), HasSubstr("truncated at quality rows"));
}

TEST(KvCalibrationFile, RefusesEveryTruncationAndTrailingBytes) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const absl::Status st = parse_status(bytes.substr(0, n));
    ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "prefix of " << n << " bytes: " << st;
  }
  EXPECT_THAT(parse_status(bytes + "x").message(), HasSubstr("the file has"));
}

TEST(KvCalibrationFile, RefusesOversizeDimensionsAndStringsBeforeAllocating) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  for (const auto& [at, value, field] : {std::tuple{kNLayerAt, 513u, "n_layer 513"},
                                         std::tuple{kNHeadKvAt, 257u, "n_head_kv 257"},
                                         std::tuple{kHeadDimAt, 1025u, "head_dim 1025"},
                                         std::tuple{kHeadDimAt, 0u, "head_dim 0"},
                                         std::tuple{kNLayerAt, 0xFFFFFFFFu, "n_layer"}}) {
    std::string bad = bytes;
    put_u32(bad, at, value);
    EXPECT_THAT(parse_status(bad).message(), HasSubstr(field));
  }
  // Within each cap, but 2 x 256 heads of 1024 x 1024 floats are over 1 GiB.
  std::string huge = bytes;
  put_u32(huge, kNHeadKvAt, 256);
  put_u32(huge, kHeadDimAt, 1024);
  EXPECT_THAT(parse_status(huge).message(), HasSubstr("at most 1073741824"));
  std::string digest_length = bytes;
  put_u32(digest_length, kDigestLengthAt, 1u << 31);
  EXPECT_THAT(parse_status(digest_length).message(), HasSubstr("model_digest has 2147483648 bytes (at most 4096)"));
  std::string source_length = bytes;
  put_u32(source_length, kSourceLengthAt, 5000);
  EXPECT_THAT(parse_status(source_length).message(), HasSubstr("source has 5000 bytes"));
  std::string pre_rope = bytes;
  pre_rope[kPreRopeAt] = 2;
  EXPECT_THAT(parse_status(pre_rope).message(), HasSubstr("pre_rope_keys"));
}

TEST(KvCalibrationFile, RefusesNonFiniteValues) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  std::string mean = bytes;
  put_f32(mean, kArraysAt + 4, std::nanf(""));
  EXPECT_THAT(parse_status(mean).message(), HasSubstr("layer 0 K head 0 mean[1] is nan"));
  std::string basis = bytes;
  put_f32(basis, kBasisAt + 4 * 3, std::numeric_limits<float>::infinity());
  EXPECT_THAT(parse_status(basis).message(), HasSubstr("basis[3] is inf"));
  std::string shape = bytes;
  put_f32(shape, kShapeAt + 4 * 10, std::nanf(""));
  EXPECT_THAT(parse_status(shape).message(), HasSubstr("layer 0 K shape[10]"));
}

TEST(KvCalibrationFile, RefusesABasisThatIsNotOrthonormal) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  std::string scaled = bytes;
  put_f32(scaled, kBasisAt + 4 * 5, 1.01f);  // row 1 of length 1.01
  EXPECT_THAT(parse_status(scaled).message(), HasSubstr("rows 1 and 1"));
  std::string skewed = bytes;
  put_f32(skewed, kBasisAt + 4 * 1, 0.1f);  // row 0 leans onto row 1
  EXPECT_THAT(parse_status(skewed).message(), HasSubstr("not orthonormal"));
  std::string slightly = bytes;
  put_f32(slightly, kBasisAt + 4 * 5, 1.0002f);  // within 1e-3
  EXPECT_TRUE(parse_kv_calibration(slightly).ok());
}

TEST(KvCalibrationFile, RefusesAscendingOrNegativeVariances) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  std::string ascending = bytes;
  put_f32(ascending, kVarianceAt + 4 * 2, 3.0f);  // 4, 2, 3, 0
  EXPECT_THAT(parse_status(ascending).message(), HasSubstr("variance[2] = 3"));
  std::string negative = bytes;
  put_f32(negative, kVarianceAt + 4 * 3, -1e-9f);
  EXPECT_THAT(parse_status(negative).message(), HasSubstr("variance[3]"));
}

TEST(KvCalibrationFile, RefusesAShapeThatDoesNotSumToOneOrIsNegative) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  std::string heavy = bytes;
  put_f32(heavy, kShapeAt + 4 * (kKvShapeBins + 7), 0.5f);  // the V shape
  EXPECT_THAT(parse_status(heavy).message(), HasSubstr("layer 0 V shape sums to"));
  std::string negative = bytes;
  put_f32(negative, kShapeAt, -1.0f / kKvShapeBins);
  EXPECT_THAT(parse_status(negative).message(), HasSubstr("shape[0]"));
}

// Hostile bytes: random corruptions of a real file give a calibration that
// passes every check or InvalidArgument, never a crash (the ASan build runs
// this too).
TEST(KvCalibrationFile, RandomCorruptionsAreRefusedOrStillValid) {
  const std::string bytes = serialize_kv_calibration(small_calibration());
  std::mt19937 rng(3);
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<char>(rng());
    if (round % 3 == 0) bad.resize(rng() % bad.size());
    const absl::StatusOr<KvCalibration> parsed = parse_kv_calibration(bad);
    if (parsed.ok()) {
      EXPECT_EQ(serialize_kv_calibration(*parsed), bad);
    } else {
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
}

TEST(KvCalibrationFile, SaveAndLoadRoundTripAtomically) {
  const std::string dir = testing::make_temp_dir("kv-calibration");
  const std::string path = dir + "/m.batoncal";
  const KvCalibration c = small_calibration();
  ASSERT_TRUE(save_kv_calibration(c, path).ok());
  absl::StatusOr<KvCalibration> back = load_kv_calibration(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(serialize_kv_calibration(*back), serialize_kv_calibration(c));
  EXPECT_EQ(load_kv_calibration(dir + "/missing.batoncal").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(dir + "/bad.batoncal") << "BATONCAL";
  absl::Status bad = load_kv_calibration(dir + "/bad.batoncal").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("bad.batoncal: KV calibration: truncated at version"));
}

// ---- the quality table (format 2) ----

KvCalibration with_quality_table() {
  KvCalibration c = small_calibration();
  c.quality = {{"tc-b2", 0.199, 0.025, 3.4e-4}, {"int4-pc-kg128-g32-z3", 0.269, -0.068, 1.8e-3}};
  return c;
}

// Where the quality table starts in with_quality_table()'s file.
constexpr size_t kQualityAt = kShapeAt + 2 * kKvShapeBins * 4;
constexpr size_t kFirstRowNameAt = kQualityAt + 4 + 4;
constexpr size_t kFirstRowRatioAt = kFirstRowNameAt + 5;  // after "tc-b2"

void put_f64(std::string& bytes, size_t at, double v) { std::memcpy(bytes.data() + at, &v, 8); }

TEST(KvCalibrationQuality, RoundTripsAsVersionTwoAppendedToTheVersionOneBytes) {
  const KvCalibration c = with_quality_table();
  const std::string bytes = serialize_kv_calibration(c);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + kVersionAt, 4);
  EXPECT_EQ(version, 2u);
  absl::StatusOr<KvCalibration> back = parse_kv_calibration(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->quality, c.quality);
  EXPECT_EQ(serialize_kv_calibration(*back), bytes);
  // The table follows the version 1 file's bytes (but the version field).
  const KvCalibration without = small_calibration();
  const std::string v1 = serialize_kv_calibration(without);
  EXPECT_EQ(v1.size(), kQualityAt);
  EXPECT_EQ(bytes.substr(0, kVersionAt), v1.substr(0, kVersionAt));
  EXPECT_EQ(bytes.substr(kVersionAt + 4, kQualityAt - kVersionAt - 4), v1.substr(kVersionAt + 4));
  // The digest is the file's: the table is part of what both ends must share.
  EXPECT_EQ(kv_calibration_digest(*back), sha256(bytes));
  EXPECT_NE(kv_calibration_digest(*back), kv_calibration_digest(without));
  EXPECT_EQ(kv_calibration_digest(without), sha256(v1));
}

TEST(KvCalibrationQuality, AVersionOneFileStillParsesWithoutATable) {
  const std::string v1 = serialize_kv_calibration(small_calibration());
  uint32_t version = 0;
  std::memcpy(&version, v1.data() + kVersionAt, 4);
  EXPECT_EQ(version, 1u);
  absl::StatusOr<KvCalibration> back = parse_kv_calibration(v1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->quality.empty());
}

TEST(KvCalibrationQuality, RefusesEveryTruncationAndTrailingBytes) {
  const std::string bytes = serialize_kv_calibration(with_quality_table());
  for (size_t n = kQualityAt; n < bytes.size(); ++n) {
    const absl::Status st = parse_status(bytes.substr(0, n));
    ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "prefix of " << n << " bytes: " << st;
  }
  EXPECT_THAT(parse_status(bytes + "x").message(), HasSubstr("1 bytes after the quality table"));
}

TEST(KvCalibrationQuality, RefusesRowCountsAndNameLengthsOverTheirCapsBeforeAllocating) {
  const std::string bytes = serialize_kv_calibration(with_quality_table());
  for (const auto& [rows, expected] : {std::pair{0u, "has 0 rows"},
                                       std::pair{65u, "has 65 rows (version 2 holds 1..64)"},
                                       std::pair{0xFFFFFFFFu, "has 4294967295 rows"}}) {
    std::string bad = bytes;
    put_u32(bad, kQualityAt, rows);
    EXPECT_THAT(parse_status(bad).message(), HasSubstr(expected));
  }
  std::string long_name = bytes;
  put_u32(long_name, kQualityAt + 4, 129);
  EXPECT_THAT(parse_status(long_name).message(), HasSubstr("quality row 0 codec name has 129 bytes (at most 128)"));
  std::string huge_name = bytes;
  put_u32(huge_name, kQualityAt + 4, 0x80000000u);
  EXPECT_THAT(parse_status(huge_name).message(), HasSubstr("at most 128"));
}

TEST(KvCalibrationQuality, RefusesNonCanonicalOrUnknownCodecsAndBadFigures) {
  const std::string bytes = serialize_kv_calibration(with_quality_table());
  std::string unknown = bytes;
  unknown[kFirstRowNameAt] = 'x';  // "xc-b2"
  EXPECT_THAT(parse_status(unknown).message(), HasSubstr("quality row 0: codec 'xc-b2'"));
  KvCalibration aliased = with_quality_table();
  aliased.quality[1].codec = "int4-kg128-pc-g32-z3";  // the same codec, options in another order
  EXPECT_THAT(parse_status(serialize_kv_calibration(aliased)).message(), HasSubstr("is not canonical"));
  for (const auto& [at, value] : {std::pair{kFirstRowRatioAt, std::nan("")},
                                  std::pair{kFirstRowRatioAt, 0.0},
                                  std::pair{kFirstRowRatioAt, -0.5},
                                  std::pair{kFirstRowRatioAt + 8, std::numeric_limits<double>::infinity()},
                                  std::pair{kFirstRowRatioAt + 16, -1e-9},
                                  std::pair{kFirstRowRatioAt + 16, std::nan("")}}) {
    std::string bad = bytes;
    put_f64(bad, at, value);
    const absl::Status st = parse_status(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(st.message(), HasSubstr("quality row 0 (tc-b2)")) << value;
  }
  std::string negative_delta = bytes;  // a codec may score better than F16 on a small text
  put_f64(negative_delta, kFirstRowRatioAt + 8, -0.3);
  EXPECT_TRUE(parse_kv_calibration(negative_delta).ok());
}

TEST(KvCalibrationQuality, RandomCorruptionsOfTheTableAreRefusedOrStillValid) {
  const std::string bytes = serialize_kv_calibration(with_quality_table());
  std::mt19937 rng(5);
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bad[kQualityAt + rng() % (bad.size() - kQualityAt)] = static_cast<char>(rng());
    const absl::StatusOr<KvCalibration> parsed = parse_kv_calibration(bad);
    if (parsed.ok()) {
      EXPECT_EQ(serialize_kv_calibration(*parsed), bad);
    } else {
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
      ++refused;
    }
  }
  EXPECT_GT(refused, 500);
}

}  // namespace
}  // namespace baton
