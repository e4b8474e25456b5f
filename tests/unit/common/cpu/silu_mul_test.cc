// silu_mul_f32 and gelu_mul_f32 (common/cpu/vec.h, silu_exp.h): every SIMD
// level gives the same bits (a model's activations must not depend on the
// kernel set), and they are within a few ulp of silu / gelu computed in
// double precision.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/cpu/matmul_kernels.h"
#include "common/cpu/vec.h"
#include "common/util/cpu_features.h"

namespace baton {
namespace {

using Kernel = void (*)(float*, const float*, int64_t);

struct Level {
  const char* name;
  Kernel kernel;
  SimdLevel needs;
};

const Level kLevels[] = {{"scalar", cpu_kernels::silu_mul_f32_scalar, SimdLevel::kScalar},
                         {"avx2", cpu_kernels::silu_mul_f32_avx2, SimdLevel::kAvx2},
                         {"avx512", cpu_kernels::silu_mul_f32_avx512, SimdLevel::kAvx512}};
const Level kGeluLevels[] = {{"scalar", cpu_kernels::gelu_mul_f32_scalar, SimdLevel::kScalar},
                             {"avx2", cpu_kernels::gelu_mul_f32_avx2, SimdLevel::kAvx2},
                             {"avx512", cpu_kernels::gelu_mul_f32_avx512, SimdLevel::kAvx512}};

// Gate values: a wide normal spread, the clamps' neighbourhoods, and the
// special values.
std::vector<float> gates(size_t n_random) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> g;
  for (size_t i = 0; i < n_random; ++i) g.push_back(normal(rng));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-42f, 86.9f, 87.0f, 87.1f, -87.9f, -88.0f, -88.1f, 100.0f,
                  -100.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    g.push_back(v);
  }
  return g;
}

std::vector<float> run(Kernel kernel, const std::vector<float>& g, const std::vector<float>& up) {
  std::vector<float> out = g;
  kernel(out.data(), up.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Every level of `levels` against the first (scalar), on the whole array and
// every length 0..40 (the vector tails), and the dispatched entry point.
void expect_same_bits_at_every_level(const Level (&levels)[3], Kernel dispatched_kernel) {
  const std::vector<float> g = gates(4000);
  std::vector<float> up(g.size());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (float& v : up) v = u(rng);
  const std::vector<float> reference = run(levels[0].kernel, g, up);
  int compared = 0;
  for (const Level& level : levels) {
    if (best_simd_level() < level.needs) continue;
    ++compared;
    const std::vector<float> out = run(level.kernel, g, up);
    ASSERT_EQ(std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)), 0) << level.name;
    for (size_t len = 0; len <= 40; ++len) {
      std::vector<float> part(g.end() - static_cast<std::ptrdiff_t>(len), g.end());  // the special values last
      std::vector<float> part_up(up.end() - static_cast<std::ptrdiff_t>(len), up.end());
      const std::vector<float> got = run(level.kernel, part, part_up);
      for (size_t i = 0; i < len; ++i) {
        const float want = reference[g.size() - len + i];
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
            << level.name << " length " << len << " index " << i << " gate " << part[i];
      }
    }
  }
  EXPECT_GE(compared, 1);
  EXPECT_EQ(std::memcmp(run(dispatched_kernel, g, up).data(), reference.data(), g.size() * sizeof(float)), 0);
}

TEST(SiluMul, EveryLevelGivesTheSameBitsAtEveryLengthAndValue) {
  expect_same_bits_at_every_level(kLevels, silu_mul_f32);
}

TEST(GeluMul, EveryLevelGivesTheSameBitsAtEveryLengthAndValue) {
  expect_same_bits_at_every_level(kGeluLevels, gelu_mul_f32);
}

TEST(SiluMul, WithinFourUlpOfDoublePrecisionAndExactWhereTheSigmoidSaturates) {
  const std::vector<float> g = gates(20000);
  const std::vector<float> up(g.size(), 1.0f);
  const std::vector<float> out = run(cpu_kernels::silu_mul_f32_scalar, g, up);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(out[i]));
      continue;
    }
    if (std::isinf(x)) continue;  // inf / inf: NaN, as std::exp gave
    const double want = x / (1.0 + std::exp(-x));
    if (x > 88.0) {
      EXPECT_EQ(out[i], g[i]) << "gate " << g[i];  // the sigmoid is 1 in float
    } else if (x < -88.0) {
      EXPECT_EQ(out[i], 0.0f) << "gate " << g[i];  // g / inf, as with std::exp
    } else if (x < -87.0) {
      EXPECT_LE(std::abs(out[i]), 1e-30f) << "gate " << g[i];
    } else {
      const double ulp = std::abs(std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want));
      EXPECT_LE(std::abs(out[i] - want), 4 * std::max(ulp, 1e-45)) << "gate " << g[i] << " want " << want;
    }
  }
}

// GELU (tanh form) in double: 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x +
// 0.044715 x^3). The float kernel's e^x argument x = -2u carries its own
// rounding (a few ulp of x) through e^x: the bound is 4 ulp plus |x| 2^-21
// relative. Where the double form's 1 + tanh(u) loses its digits (u below
// about -9) the sigmoid form is the exact one: there both are compared as
// g / (1 + e^(-2u)) in double.
TEST(GeluMul, WithinAFewUlpOfDoublePrecisionAndExactWhereItSaturates) {
  const std::vector<float> g = gates(20000);
  const std::vector<float> up(g.size(), 1.0f);
  const std::vector<float> out = run(cpu_kernels::gelu_mul_f32_scalar, g, up);
  int checked = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(out[i]));
      continue;
    }
    if (x == -std::numeric_limits<double>::infinity()) {
      EXPECT_TRUE(std::isnan(out[i]));  // -inf x 0, as the tanh form gave
      continue;
    }
    if (std::isinf(x)) {
      EXPECT_EQ(out[i], g[i]);
      continue;
    }
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double want = x / (1.0 + std::exp(-2.0 * u));
    if (-2.0 * u < -87.0) {
      EXPECT_EQ(out[i], g[i]) << "gate " << g[i];  // the sigmoid is 1 in float
    } else if (-2.0 * u > 88.0) {
      EXPECT_EQ(out[i], 0.0f) << "gate " << g[i];  // g / inf
    } else {
      const double ulp = std::abs(std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want));
      const double bound = 4 * std::max(ulp, 1e-45) + std::abs(want) * std::abs(2.0 * u) * 0x1p-21;
      EXPECT_LE(std::abs(out[i] - want), bound) << "gate " << g[i] << " want " << want;
      if (std::abs(u) < 9.0) {  // and the tanh form itself, where it keeps its digits
        const double tanh_form = 0.5 * x * (1.0 + std::tanh(u));
        EXPECT_LE(std::abs(out[i] - tanh_form), bound + 1e-15 * std::abs(x)) << "gate " << g[i];
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 19000);
}

}  // namespace
}  // namespace baton
