// Causal GQA prefill attention: the mma.sync scheme of flash_attention.cu
// (16 query rows of one head per warp, S and O in registers, online softmax
// on the accumulators) with its K/V tiles pipelined. The first H200 run
// measured that kernel at ~61 TFLOP/s of attention at 8K tokens of the 3B
// shape, against ~570 for the GEMMs beside it: its warps waited on every
// tile's global loads (issued and stored to shared memory between two
// barriers, nothing to overlap them with) and transposed V with 16-bit scalar
// stores. Here:
//   - K and V tiles are double-buffered in shared memory and filled with
//     cp.async (16 bytes a thread, zero-filled past the last key): tile i + 1
//     is in flight while the warps compute on tile i;
//   - V stays row-major (16-byte copies like K); P V's B fragments come from
//     ldmatrix.trans, two 8-dim tiles per x4, and K's from ldmatrix, two
//     k-steps per x4 (head_dim >= 32);
//   - 8 warps (128 queries) per block, so each K/V tile in shared memory
//     serves twice the queries of flash_attention.cu's 4;
//   - exp2 by ex2.approx.ftz;
//   - only tiles that reach past a warp's first query position are masked.
// Q is staged once through the second buffer's K and V tiles before the
// first load into them. P is rounded to the 16-bit type before P V with f32
// accumulation, as in flash_attention.cu, so the same tolerances hold.
//
// Measured on the H200 (2026-12-04, `baton bench prefill-cuda --profile`,
// attention kernels' own time, llama-3.2-3b / 1b at 8192 tokens, TFLOP/s):
// flash 61 / -; this scheme with 4 warps, exp2f and 32-bit K loads 152 / 154;
// + ex2.approx and ldmatrix K 155 / 141; that at 3 blocks per SM 164 / 161;
// 8 warps (this file) 186 / 158. At 32768 tokens 215 / 174.
#include "cloud_prefill/cuda/attention_launch.cuh"
#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_mma.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

constexpr int kBlockK = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

constexpr int kWarps = 8;  // 16 query rows each
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQ = kWarps * 16;  // queries per block
static_assert(kBlockQ <= 2 * kBlockK, "Q is staged in stage 1's K and V tiles");

template <int kHeadDim>
struct PipeSmem {
  // Q (up to 128 rows) is staged in stage 1's K and V tiles, 64 rows each and adjacent.
  static constexpr int kPitch = kHeadDim + 8;  // elements per row: 16-byte aligned, conflict-free for ldmatrix
  static constexpr size_t kTile = sizeof(uint16_t) * kBlockK * kPitch;  // one K or V tile, bytes
  static constexpr size_t kBytes = 4 * kTile;  // [stage 0, 1][K, V]
};

// 16 bytes global -> shared, asynchronous; `fill` false writes zeros (the
// source address must still be valid).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool fill) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = fill ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Four 8x8 16-bit matrices: lanes 8m..8m+7 give the row addresses of matrix
// m; register m holds matrix m's fragment (row g, columns 2t, 2t + 1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Four 8x8 16-bit matrices, transposed: lanes 8m..8m+7 give the row
// addresses of matrix m; register m holds matrix m's fragment.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1)
    pipelined_attention_kernel(AttentionParams p, const T* __restrict__ q, KvStore<T> store, T* __restrict__ out) {
  using S = PipeSmem<kHeadDim>;
  constexpr bool kLdmatrixK = kHeadDim >= 32;  // two k-steps per ldmatrix.x4
  constexpr int kVectors = kHeadDim / 8;    // 16-byte vectors per row
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S = Q K^T
  constexpr int kKeyTiles = kBlockK / 8;    // n-tiles of S
  constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O (even: ldmatrix x4 takes two)
  extern __shared__ __align__(128) unsigned char smem[];
  const auto k_tile = [](int stage) { return reinterpret_cast<T*>(smem + (2 * stage) * S::kTile); };
  const auto v_tile = [](int stage) { return reinterpret_cast<T*>(smem + (2 * stage + 1) * S::kTile); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Heaviest (latest) query blocks first: causal work grows with the position.
  const int64_t q0 = (int64_t{gridDim.x} - 1 - blockIdx.x) * kBlockQ;
  const int h = blockIdx.y;
  const int kv_head = h / (p.n_head / p.n_head_kv);
  const int64_t q_dim = int64_t{p.n_head} * kHeadDim;
  const int q_rows = static_cast<int>(min_i64(kBlockQ, p.n_queries - q0));
  const int64_t n_keys = p.pos0 + q0 + q_rows;  // keys any query of the block sees
  const int n_tiles = static_cast<int>((n_keys + kBlockK - 1) / kBlockK);

  // Q tile -> shared (stage 1's K and V tiles, free until the first
  // prefetch into them) -> this warp's A fragments (registers, whole kernel).
  const int row0 = warp * 16;
  uint32_t q_frag[kDimSteps][4];
  load_q_fragments<T, kHeadDim, kBlockQ, kThreads>(q_frag, q, q0, q_rows, q_dim, h, k_tile(1), S::kPitch, row0, g,
                                                   t);
  __syncthreads();  // every warp has its Q fragments: stage 1 may be filled

  // Queues the copies of tile `tile`'s K and V rows into `stage` as one group.
  const auto load_tile = [&](int tile, int stage) {
    const int64_t k0 = int64_t{tile} * kBlockK;
    T* kt = k_tile(stage);
    T* vt = v_tile(stage);
    for (int idx = threadIdx.x; idx < kBlockK * kVectors; idx += kThreads) {
      const int r = idx / kVectors, c = idx % kVectors;
      const bool in = k0 + r < n_keys;
      const int64_t pos = in ? k0 + r : 0;  // a valid address; the copy writes zeros
      const int64_t col = int64_t{kv_head} * kHeadDim + c * 8;
      cp_async16(kt + r * S::kPitch + c * 8, store.row(p.layer, 0, pos) + col, in);
      cp_async16(vt + r * S::kPitch + c * 8, store.row(p.layer, 1, pos) + col, in);
    }
    cp_async_commit();
  };

  // Rows g and g + 8 of the warp: query index within the block, position.
  const int row_a = row0 + g, row_b = row0 + g + 8;
  const int64_t pos_a = p.pos0 + q0 + row_a, pos_b = p.pos0 + q0 + row_b;
  const int64_t first_pos = p.pos0 + q0 + row0;  // the warp's earliest query
  const bool valid_a = row_a < q_rows, valid_b = row_b < q_rows;
  const float scale_log2 = p.scale * kLog2e;  // scores in log2 units: exp2 below
  float max_a = -INFINITY, max_b = -INFINITY;
  float sum_a = 0.0f, sum_b = 0.0f;  // this lane's share of the row sums
  float o[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  load_tile(0, 0);
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < n_tiles) {
      load_tile(tile + 1, stage ^ 1);  // the last iteration's barrier freed that stage
      cp_async_wait<1>();              // this tile's group has landed (the next may still fly)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // ... for every thread's copies
    const int64_t k0 = int64_t{tile} * kBlockK;
    const T* kt = k_tile(stage);
    const T* vt = v_tile(stage);

    // S = Q K^T: B fragment (k = dim, n = key) from K rows; by ldmatrix.x4
    // lane l points at key 8 j + l % 8, dims 16 kk + 8 (l / 8): registers
    // 0, 1 are k-step kk's b0, b1 and 2, 3 k-step kk + 1's.
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      if constexpr (kLdmatrixK) {
        const T* k_rows = kt + (j * 8 + lane % 8) * S::kPitch + (lane / 8) * 8;
#pragma unroll
        for (int kk = 0; kk < kDimSteps; kk += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, k_rows + kk * 16);
          mma_16816<T>(s[j], q_frag[kk], b[0], b[1]);
          mma_16816<T>(s[j], q_frag[kk + 1], b[2], b[3]);
        }
      } else {
        const T* k_row = kt + (j * 8 + g) * S::kPitch + 2 * t;
#pragma unroll
        for (int kk = 0; kk < kDimSteps; ++kk) {
          mma_16816<T>(s[j], q_frag[kk], load32(k_row + kk * 16), load32(k_row + kk * 16 + 8));
        }
      }
    }

    // Scale; mask (causal, padding rows and keys) only where the tile
    // reaches past the warp's first position. Below that every key is at or
    // before every row's position and inside the context; the rows of a
    // warp past the block's end read zero Q rows (finite scores) and are
    // never written.
    float tile_max_a, tile_max_b;
    if (k0 + kBlockK - 1 > first_pos) {
      scale_scores<true>(s, scale_log2, k0, t, valid_a, pos_a, valid_b, pos_b, tile_max_a, tile_max_b);
    } else {
      scale_scores<false>(s, scale_log2, k0, t, valid_a, pos_a, valid_b, pos_b, tile_max_a, tile_max_b);
    }
    online_softmax_step(s, o, tile_max_a, tile_max_b, max_a, max_b, sum_a, sum_b,
                        [](float x) { return fast_exp2(x); });

    // O += P V: P's A fragment for keys [16 kb, 16 kb + 16) is the S
    // accumulators of key n-tiles 2 kb and 2 kb + 1. V's B fragments (k =
    // key, n = dim) by ldmatrix.trans from the row-major tile: lane l points
    // at key 16 kb + 8 (m & 1) + l % 8 of dims 8 (n + m / 2).., m = l / 8, so
    // registers 0, 1 are dim tile n's b0, b1 and 2, 3 dim tile n + 1's.
    const int m_sel = lane / 8, m_row = lane % 8;
#pragma unroll
    for (int kb = 0; kb < kBlockK / 16; ++kb) {
      const uint32_t p_frag[4] = {pack2<T>(s[2 * kb][0], s[2 * kb][1]), pack2<T>(s[2 * kb][2], s[2 * kb][3]),
                                  pack2<T>(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                                  pack2<T>(s[2 * kb + 1][2], s[2 * kb + 1][3])};
      const T* v_rows = vt + (kb * 16 + (m_sel & 1) * 8 + m_row) * S::kPitch + (m_sel >> 1) * 8;
#pragma unroll
      for (int n = 0; n < kDimTiles; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_rows + n * 8);
        mma_16816<T>(o[n], p_frag, b[0], b[1]);
        mma_16816<T>(o[n + 1], p_frag, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

  T* head_out = out + int64_t{h} * kHeadDim;
  store_output_rows<T>(o, sum_a, sum_b, valid_a, valid_b, head_out + (q0 + row_a) * q_dim,
                       head_out + (q0 + row_b) * q_dim, t);
}

template <typename T, int kHeadDim>
struct PipelinedKernel {
  static auto kernel() { return pipelined_attention_kernel<T, kHeadDim>; }
  static constexpr size_t kSmemBytes = PipeSmem<kHeadDim>::kBytes;
  static constexpr int kBlockQueries = kBlockQ;
  static constexpr int kBlockThreads = kThreads;
};

}  // namespace

cudaError_t launch_flash_attention_pipelined(const AttentionParams& params, const void* q, const PagedKvView& kv,
                                             void* out, cudaStream_t stream) {
  return launch_attention_kernel<PipelinedKernel>(params, q, kv, out, stream);
}

}  // namespace baton::cuda
