// Causal GQA prefill attention, FlashAttention-2 style, on tensor cores with
// mma.sync.m16n8k16 (f32 accumulate), scores and output kept in registers.
//
// A block of 4 warps owns 64 queries of one head; warp w owns query rows
// [16w, 16w + 16). Per 64-key tile (K and V of the tile in shared memory,
// V transposed so that its B fragments are 32-bit loads):
//   S = Q K^T         8 key n-tiles x head_dim/16 k-steps of mma; Q's A
//                     fragments stay in registers for the whole kernel
//   online softmax    on the S accumulators: each row lives in the 4 lanes of
//                     a quad (shfl_xor 1, 2); running max m and partial sum l
//   O += P V          the S accumulators of two key n-tiles are exactly the A
//                     fragment of one 16-key k-step (converted to 16 bits)
// Finally out = O / l. Scores of the whole context are never materialized.
// Fragment layouts: cuda_mma.cuh.
#include "cloud_prefill/cuda/attention_launch.cuh"
#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_mma.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

constexpr int kBlockQ = 64;  // queries per block
constexpr int kBlockK = 64;  // keys per tile
constexpr int kWarps = 4;    // kBlockQ / 16
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int kHeadDim>
struct Smem {
  static constexpr int kPitchQK = kHeadDim + 8;  // q and k tiles [row][dim], T
  static constexpr int kPitchVt = kBlockK + 8;   // transposed v tile [dim][key], T
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(uint16_t) * kBlockQ * kPitchQK;
  static constexpr size_t kVt = kK + sizeof(uint16_t) * kBlockK * kPitchQK;
  static constexpr size_t kBytes = kVt + sizeof(uint16_t) * kHeadDim * kPitchVt;
};

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(AttentionParams p, const T* __restrict__ q,
                                                                   KvStore<T> store, T* __restrict__ out) {
  using S = Smem<kHeadDim>;
  constexpr int kVectors = kHeadDim / 8;      // 16-byte vectors per row
  constexpr int kDimSteps = kHeadDim / 16;    // k-steps of S = Q K^T
  constexpr int kKeyTiles = kBlockK / 8;      // n-tiles of S
  constexpr int kDimTiles = kHeadDim / 8;     // n-tiles of O
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem + S::kQ);
  T* k_tile = reinterpret_cast<T*>(smem + S::kK);
  T* vt_tile = reinterpret_cast<T*>(smem + S::kVt);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Heaviest (latest) query blocks first: causal work grows with the position.
  const int64_t q0 = (int64_t{gridDim.x} - 1 - blockIdx.x) * kBlockQ;
  const int h = blockIdx.y;
  const int kv_head = h / (p.n_head / p.n_head_kv);
  const int64_t q_dim = int64_t{p.n_head} * kHeadDim;
  const int q_rows = static_cast<int>(min_i64(kBlockQ, p.n_queries - q0));
  const int64_t n_keys = p.pos0 + q0 + q_rows;  // keys any query of the block sees

  // Q tile -> shared -> this warp's A fragments (registers, whole kernel).
  const int row0 = warp * 16;
  uint32_t q_frag[kDimSteps][4];
  load_q_fragments<T, kHeadDim, kBlockQ, kThreads>(q_frag, q, q0, q_rows, q_dim, h, q_tile, S::kPitchQK, row0, g,
                                                   t);

  // Rows g and g + 8 of the warp: query index within the block, position.
  const int row_a = row0 + g, row_b = row0 + g + 8;
  const int64_t pos_a = p.pos0 + q0 + row_a, pos_b = p.pos0 + q0 + row_b;
  const bool valid_a = row_a < q_rows, valid_b = row_b < q_rows;
  const float scale_log2 = p.scale * kLog2e;  // scores in log2 units: exp2 below
  float max_a = -INFINITY, max_b = -INFINITY;
  float sum_a = 0.0f, sum_b = 0.0f;  // this lane's share of the row sums
  float o[kDimTiles][4];
  #pragma unroll
  for (int n = 0; n < kDimTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int64_t k0 = 0; k0 < n_keys; k0 += kBlockK) {
    const int k_rows = static_cast<int>(min_i64(kBlockK, n_keys - k0));
    __syncthreads();  // every warp is done with the previous K / V tile
    // Zeros past the end: a NaN times a zero probability would poison O.
    // K: consecutive lanes take consecutive vectors of a row (coalesced reads,
    // conflict-free 16-byte stores).
    for (int idx = threadIdx.x; idx < kBlockK * kVectors; idx += kThreads) {
      const int r = idx / kVectors, c = idx % kVectors;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < k_rows) {
        value = reinterpret_cast<const uint4*>(store.row(p.layer, 0, k0 + r) + int64_t{kv_head} * kHeadDim)[c];
      }
      reinterpret_cast<uint4*>(k_tile + r * S::kPitchQK)[c] = value;
    }
    // V, transposed: consecutive lanes take consecutive keys of one 8-dim
    // vector, so the 16-bit stores of a warp land in consecutive words.
    for (int idx = threadIdx.x; idx < kBlockK * kVectors; idx += kThreads) {
      const int c = idx / kBlockK, r = idx % kBlockK;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < k_rows) {
        value = reinterpret_cast<const uint4*>(store.row(p.layer, 1, k0 + r) + int64_t{kv_head} * kHeadDim)[c];
      }
      const T* v8 = reinterpret_cast<const T*>(&value);
#pragma unroll
      for (int i = 0; i < 8; ++i) vt_tile[(c * 8 + i) * S::kPitchVt + r] = v8[i];
    }
    __syncthreads();

    // S = Q K^T: B fragment (k = dim, n = key) from k_tile rows.
    float s[kKeyTiles][4];
    #pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const T* k_row = k_tile + (j * 8 + g) * S::kPitchQK + 2 * t;
      #pragma unroll
      for (int kk = 0; kk < kDimSteps; ++kk) {
        mma_16816<T>(s[j], q_frag[kk], load32(k_row + kk * 16), load32(k_row + kk * 16 + 8));
      }
    }

    // Mask (causal, padding) and scale.
    float tile_max_a, tile_max_b;
    scale_scores<true>(s, scale_log2, k0, t, valid_a, pos_a, valid_b, pos_b, tile_max_a, tile_max_b);
    // New row maxima over the quad, P = exp2(S - max), sums and O rescaled.
    online_softmax_step(s, o, tile_max_a, tile_max_b, max_a, max_b, sum_a, sum_b,
                        [](float x) { return exp2f(x); });

    // O += P V: P's A fragment for keys [16 kb, 16 kb + 16) is the S
    // accumulators of key n-tiles 2 kb and 2 kb + 1; V's B fragment
    // (k = key, n = dim) from the transposed tile.
    #pragma unroll
    for (int kb = 0; kb < kBlockK / 16; ++kb) {
      const uint32_t p_frag[4] = {pack2<T>(s[2 * kb][0], s[2 * kb][1]), pack2<T>(s[2 * kb][2], s[2 * kb][3]),
                                  pack2<T>(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                                  pack2<T>(s[2 * kb + 1][2], s[2 * kb + 1][3])};
      #pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        const T* v_col = vt_tile + (n * 8 + g) * S::kPitchVt + kb * 16 + 2 * t;
        mma_16816<T>(o[n], p_frag, load32(v_col), load32(v_col + 8));
      }
    }
  }

  T* head_out = out + int64_t{h} * kHeadDim;
  store_output_rows<T>(o, sum_a, sum_b, valid_a, valid_b, head_out + (q0 + row_a) * q_dim,
                       head_out + (q0 + row_b) * q_dim, t);
}

template <typename T, int kHeadDim>
struct FlashKernel {
  static auto kernel() { return flash_attention_kernel<T, kHeadDim>; }
  static constexpr size_t kSmemBytes = Smem<kHeadDim>::kBytes;
  static constexpr int kBlockQueries = kBlockQ;
  static constexpr int kBlockThreads = kThreads;
};

}  // namespace

bool flash_attention_supports(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

cudaError_t launch_flash_attention(const AttentionParams& params, const void* q, const PagedKvView& kv, void* out,
                                   cudaStream_t stream) {
  return launch_attention_kernel<FlashKernel>(params, q, kv, out, stream);
}

}  // namespace baton::cuda
