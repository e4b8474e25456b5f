// The tensor-core pieces the mma.sync attention kernels share
// (flash_attention.cu, flash_attention_pipelined.cu): the m16n8k16 MMA with
// f32 accumulation, 16-bit packing, and the online-softmax step on a warp's
// S accumulators.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs), g = lane / 4,
// t = lane % 4:
//   A (16 x 16, row-major) regs: {r g, c 2t..2t+1}, {r g+8, c 2t..}, {r g, c 2t+8..}, {r g+8, c 2t+8..}
//   B (16 x 8, "col")      regs: {k 2t..2t+1, n g}, {k 2t+8..2t+9, n g}
//   C (16 x 8, f32)        c0, c1: {r g, c 2t, 2t+1}; c2, c3: {r g+8, c 2t, 2t+1}
#pragma once

#include "cloud_prefill/cuda/cuda_kernel_util.cuh"

namespace baton::cuda {

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of two 16-bit values, `lo` in the low half
// (the lower column / key index).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <typename T>
__device__ __forceinline__ uint32_t load32(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Stages a block's Q rows [q0, q0 + kRows) of head h in shared memory
// (`tile`, rows of `pitch` elements; rows past q_rows zero), then, after a
// barrier, loads this warp's A fragments of its 16 rows from row0 (registers,
// for the whole kernel). The caller syncs again before reusing `tile`.
template <typename T, int kHeadDim, int kRows, int kThreads>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[kHeadDim / 16][4], const T* __restrict__ q,
                                                 int64_t q0, int q_rows, int64_t q_dim, int h, T* tile, int pitch,
                                                 int row0, int g, int t) {
  constexpr int kVectors = kHeadDim / 8;
  for (int idx = threadIdx.x; idx < kRows * kVectors; idx += kThreads) {
    const int r = idx / kVectors, c = idx % kVectors;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < q_rows) value = reinterpret_cast<const uint4*>(q + (q0 + r) * q_dim + int64_t{h} * kHeadDim)[c];
    reinterpret_cast<uint4*>(tile + r * pitch)[c] = value;
  }
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const T* base = tile + kk * 16 + 2 * t;
    q_frag[kk][0] = load32(base + (row0 + g) * pitch);
    q_frag[kk][1] = load32(base + (row0 + g + 8) * pitch);
    q_frag[kk][2] = load32(base + (row0 + g) * pitch + 8);
    q_frag[kk][3] = load32(base + (row0 + g + 8) * pitch + 8);
  }
}

// A tile's scores to log2 units (x scale_log2) and this lane's maxima of
// them for rows g (a) and g + 8 (b). With kMask, keys after a row's position
// and the rows past the block's end become -inf (the tile starts at key k0).
template <bool kMask, int kKeyTiles>
__device__ __forceinline__ void scale_scores(float (&s)[kKeyTiles][4], float scale_log2, int64_t k0, int t,
                                             bool valid_a, int64_t pos_a, bool valid_b, int64_t pos_b,
                                             float& tile_max_a, float& tile_max_b) {
  tile_max_a = -INFINITY;
  tile_max_b = -INFINITY;
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (kMask) {
        const int64_t key = k0 + j * 8 + 2 * t + e;
        s[j][e] = valid_a && key <= pos_a ? s[j][e] * scale_log2 : -INFINITY;
        s[j][2 + e] = valid_b && key <= pos_b ? s[j][2 + e] * scale_log2 : -INFINITY;
      } else {
        s[j][e] *= scale_log2;
        s[j][2 + e] *= scale_log2;
      }
      tile_max_a = fmaxf(tile_max_a, s[j][e]);
      tile_max_b = fmaxf(tile_max_b, s[j][2 + e]);
    }
  }
}

// One tile's online-softmax step for a warp's rows g (a) and g + 8 (b): s
// holds the tile's scaled scores (log2 units; -inf where masked) and
// tile_max_* this lane's maxima of them. Takes the row maxima over the quad,
// turns s into exp2(s - max), adds them to this lane's share of the row sums
// and rescales those sums and the O accumulators by exp2(old max - new max).
// Rows all -inf so far (padding rows) keep alpha 1 and subtract 0.
template <int kKeyTiles, int kDimTiles, typename Exp2>
__device__ __forceinline__ void online_softmax_step(float (&s)[kKeyTiles][4], float (&o)[kDimTiles][4],
                                                    float tile_max_a, float tile_max_b, float& max_a, float& max_b,
                                                    float& sum_a, float& sum_b, Exp2 exp2_fn) {
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    tile_max_a = fmaxf(tile_max_a, __shfl_xor_sync(0xffffffffu, tile_max_a, offset));
    tile_max_b = fmaxf(tile_max_b, __shfl_xor_sync(0xffffffffu, tile_max_b, offset));
  }
  const float new_max_a = fmaxf(max_a, tile_max_a), new_max_b = fmaxf(max_b, tile_max_b);
  const float alpha_a = new_max_a == -INFINITY ? 1.0f : exp2_fn(max_a - new_max_a);
  const float alpha_b = new_max_b == -INFINITY ? 1.0f : exp2_fn(max_b - new_max_b);
  const float sub_a = new_max_a == -INFINITY ? 0.0f : new_max_a;
  const float sub_b = new_max_b == -INFINITY ? 0.0f : new_max_b;
  max_a = new_max_a;
  max_b = new_max_b;
  sum_a *= alpha_a;
  sum_b *= alpha_b;
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
    s[j][0] = exp2_fn(s[j][0] - sub_a);  // exp2(-inf) = 0 for masked keys
    s[j][1] = exp2_fn(s[j][1] - sub_a);
    s[j][2] = exp2_fn(s[j][2] - sub_b);
    s[j][3] = exp2_fn(s[j][3] - sub_b);
    sum_a += s[j][0] + s[j][1];
    sum_b += s[j][2] + s[j][3];
  }
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
    o[n][0] *= alpha_a;
    o[n][1] *= alpha_a;
    o[n][2] *= alpha_b;
    o[n][3] *= alpha_b;
  }
}

// The end of a warp's rows g (a) and g + 8 (b): row sums over the quad, then
// out = O / l as 16-bit pairs, rows past the block's end not written.
// dst_a / dst_b: the rows' output for this head (q_dim apart or anywhere).
template <typename T, int kDimTiles>
__device__ __forceinline__ void store_output_rows(const float (&o)[kDimTiles][4], float sum_a, float sum_b,
                                                  bool valid_a, bool valid_b, T* dst_a, T* dst_b, int t) {
#pragma unroll
  for (int offset = 1; offset < 4; offset <<= 1) {
    sum_a += __shfl_xor_sync(0xffffffffu, sum_a, offset);
    sum_b += __shfl_xor_sync(0xffffffffu, sum_b, offset);
  }
  const float inv_a = valid_a ? 1.0f / sum_a : 0.0f, inv_b = valid_b ? 1.0f / sum_b : 0.0f;
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
    const int d = n * 8 + 2 * t;
    if (valid_a) *reinterpret_cast<uint32_t*>(dst_a + d) = pack2<T>(o[n][0] * inv_a, o[n][1] * inv_a);
    if (valid_b) *reinterpret_cast<uint32_t*>(dst_b + d) = pack2<T>(o[n][2] * inv_b, o[n][3] * inv_b);
  }
}

}  // namespace baton::cuda
