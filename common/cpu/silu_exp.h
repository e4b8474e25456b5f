// exp(x) for the SwiGLU gate, the same float operations at every SIMD
// level (silu_mul_f32_{scalar,avx2,avx512}), so a model's activations do not
// depend on the kernel set: +inf above 88 (as std::exp: a gate below -88
// gives -0), x clamped below at -87 (1 + e^x is then 1 in float, as with
// std::exp), n = round(x log2 e), r = x - n ln 2 in
// two FMA steps (Cody-Waite), e^r by its Taylor polynomial of degree 7
// (|r| <= ln2/2: truncation ~5e-9, below float's half ulp) in FMA Horner
// steps, times 2^n built from its exponent bits (n in [-126, 127]: normal).
// silu_mul_test: the gate within 4 ulp of silu in double precision.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace baton::silu_exp {

inline constexpr float kLo = -87.0f;
inline constexpr float kHi = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;      // few bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - kLn2Hi
inline constexpr float kC[8] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};

// The scalar form; the vector kernels apply the same steps lane by lane
// (max/min as (a > b ? a : b) / (a < b ? a : b), like vmaxps / vminps, so
// a NaN becomes kLo; its gate stays NaN through the division).
inline float exp(float x) {
  x = x > kLo ? x : kLo;
  const bool overflow = x > kHi;
  x = x < kHi ? x : kHi;
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kC[7];
  for (int k = 6; k >= 0; --k) p = std::fma(p, r, kC[k]);
  const float e = p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return overflow ? std::numeric_limits<float>::infinity() : e;
}

// gate[i] = silu(gate[i]) * up[i], as silu_mul_f32 computes it.
inline float silu_times(float g, float up) { return g / (1.0f + exp(-g)) * up; }

// GELU in its tanh approximation (GeGLU: gemma3) as the same sigmoid gate:
// 0.5 g (1 + tanh(u)) = g / (1 + e^(-2u)), u = sqrt(2 / pi) (g + 0.044715
// g^3), so gelu_mul_f32 is silu_mul_f32 with e^x at x = -2u: (g g) g, one
// FMA, one product. No 1 + tanh(u) to cancel where u is very negative (the
// std::tanh form it replaced lost every digit there), and +-inf and NaN
// come out as that form's did. gelu_mul_test: within a few ulp of double
// precision plus x's own rounding carried through e^x.
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kGeluMinusTwoSqrtTwoOverPi = -1.5957691216057308f;
inline float gelu_exp_arg(float g) { return std::fma(kGeluCubic, g * g * g, g) * kGeluMinusTwoSqrtTwoOverPi; }
inline float gelu_times(float g, float up) { return g / (1.0f + exp(gelu_exp_arg(g))) * up; }

}  // namespace baton::silu_exp
