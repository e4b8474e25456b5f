#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

// One thread per group, the exact steps of kv_quant::quantize_int8_groups:
// amax -> f16 scale (round to nearest even) -> f32 value and its IEEE inverse
// -> code = clamp(rint(x * inverse), -127, 127). No fast-math: division and
// rint are correctly rounded, the product is one rounding like the CPU's.
__global__ void quantize_int8_groups_kernel(const float* __restrict__ x, int64_t n_groups, int group,
                                            int8_t* __restrict__ codes, uint16_t* __restrict__ scales) {
  const int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (g >= n_groups) return;
  const float* xg = x + g * group;
  float amax = 0.0f;
  for (int i = 0; i < group; ++i) amax = fmaxf(amax, fabsf(xg[i]));
  const __half half_scale = __float2half_rn(__fdiv_rn(amax, 127.0f));
  const float value = __half2float(half_scale);
  const float inverse = value > 0.0f ? __fdiv_rn(1.0f, value) : 0.0f;
  scales[g] = __half_as_ushort(half_scale);
  int8_t* out = codes + g * group;
  for (int i = 0; i < group; ++i) {
    const float code = fminf(fmaxf(rintf(__fmul_rn(xg[i], inverse)), -127.0f), 127.0f);
    out[i] = static_cast<int8_t>(code);
  }
}

// f32 -> f16 bits, round to nearest even (fp32_to_fp16 for finite values).
__global__ void f32_to_f16_kernel(const float* __restrict__ x, int64_t n, uint16_t* __restrict__ out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

}  // namespace

cudaError_t launch_f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  f32_to_f16_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x, n, out);
  return cudaGetLastError();
}

cudaError_t launch_quantize_int8_groups(const float* x, int64_t n, int group, int8_t* codes, uint16_t* scales,
                                        cudaStream_t stream) {
  if (group <= 0 || n % group != 0) return cudaErrorInvalidValue;
  const int64_t n_groups = n / group;
  if (n_groups == 0) return cudaSuccess;
  constexpr int kThreads = 128;
  quantize_int8_groups_kernel<<<static_cast<unsigned>((n_groups + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, n_groups, group, codes, scales);
  return cudaGetLastError();
}

}  // namespace baton::cuda
