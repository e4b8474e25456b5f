// Causal GQA prefill attention, flash style, on tensor cores through WMMA:
// the first, simpler tensor-core version (flash_attention.cu keeps S, P and O
// in registers instead of shared memory; this one is the cross-check and the
// fallback, attention = "wmma").
//
// A block of 4 warps owns 64 queries of one head; warp w owns query rows
// [16w, 16w + 16) of the tile, and every array below is written only by the
// warp owning the row, so warps synchronize with each other only around the
// shared K/V tile loads. Per 64-key tile:
//   S = Q K^T                 (WMMA, f32 accumulate)       -> s_tile [64][64] f32
//   online softmax per row    (f32; running max m, sum l)  -> p_tile [64][64] T, O *= alpha
//   O += P V                  (WMMA, accumulator loaded from and stored to o_acc f32)
// Finally out = O / l. Scores of the whole context are never materialized.
#include <mma.h>

#include "cloud_prefill/cuda/attention_launch.cuh"
#include "cloud_prefill/cuda/cuda_kernel_util.cuh"
#include "cloud_prefill/cuda/cuda_ops.h"

namespace baton::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBlockQ = 64;   // queries per block
constexpr int kBlockK = 64;   // keys per tile
constexpr int kWarps = 4;     // kBlockQ / 16
constexpr int kThreads = kWarps * 32;

// Row pitches (elements), padded against bank conflicts; WMMA needs multiples
// of 8 (16-bit) / 4 (f32) and 32-byte aligned tile pointers, which these keep.
template <int kHeadDim>
struct Smem {
  static constexpr int kPitchT = kHeadDim + 8;  // q/k/v tiles, T
  static constexpr int kPitchS = kBlockK + 4;   // scores, f32
  static constexpr int kPitchP = kBlockK + 8;   // probabilities, T
  static constexpr int kPitchO = kHeadDim + 4;  // output accumulator, f32
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(uint16_t) * kBlockQ * kPitchT;
  static constexpr size_t kV = kK + sizeof(uint16_t) * kBlockK * kPitchT;
  static constexpr size_t kS = kV + sizeof(uint16_t) * kBlockK * kPitchT;
  static constexpr size_t kP = kS + sizeof(float) * kBlockQ * kPitchS;
  static constexpr size_t kO = kP + sizeof(uint16_t) * kBlockQ * kPitchP;
  static constexpr size_t kMax = kO + sizeof(float) * kBlockQ * kPitchO;
  static constexpr size_t kSum = kMax + sizeof(float) * kBlockQ;
  static constexpr size_t kBytes = kSum + sizeof(float) * kBlockQ;
  static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0);
};

// Copies `rows` rows of kHeadDim elements (16-byte vectors) into a tile of
// pitch kPitchT; rows at or past `valid` are zero (a NaN times a zero
// probability would still poison the sum).
template <typename T, int kHeadDim, typename RowFn>
__device__ __forceinline__ void load_tile(T* tile, int rows, int valid, RowFn row_ptr) {
  constexpr int kVectors = kHeadDim / 8;  // 8 x 16-bit per uint4
  for (int idx = threadIdx.x; idx < rows * kVectors; idx += kThreads) {
    const int r = idx / kVectors, c = idx % kVectors;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < valid) value = reinterpret_cast<const uint4*>(row_ptr(r))[c];
    reinterpret_cast<uint4*>(tile + r * Smem<kHeadDim>::kPitchT)[c] = value;
  }
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(AttentionParams p, const T* __restrict__ q,
                                                                   KvStore<T> store, T* __restrict__ out) {
  using S = Smem<kHeadDim>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem + S::kQ);
  T* k_tile = reinterpret_cast<T*>(smem + S::kK);
  T* v_tile = reinterpret_cast<T*>(smem + S::kV);
  float* s_tile = reinterpret_cast<float*>(smem + S::kS);
  T* p_tile = reinterpret_cast<T*>(smem + S::kP);
  float* o_acc = reinterpret_cast<float*>(smem + S::kO);
  float* row_max = reinterpret_cast<float*>(smem + S::kMax);
  float* row_sum = reinterpret_cast<float*>(smem + S::kSum);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Heaviest (latest) query blocks first: causal work grows with the position.
  const int64_t q0 = (int64_t{gridDim.x} - 1 - blockIdx.x) * kBlockQ;
  const int h = blockIdx.y;
  const int kv_head = h / (p.n_head / p.n_head_kv);
  const int64_t q_dim = int64_t{p.n_head} * kHeadDim;
  const int q_rows = static_cast<int>(min_i64(kBlockQ, p.n_queries - q0));
  const int64_t n_keys = p.pos0 + q0 + q_rows;  // keys any query of the block sees

  load_tile<T, kHeadDim>(q_tile, kBlockQ, q_rows,
                         [&](int r) { return q + (q0 + r) * q_dim + int64_t{h} * kHeadDim; });
  for (int i = threadIdx.x; i < kBlockQ * S::kPitchO; i += kThreads) o_acc[i] = 0.0f;
  for (int i = threadIdx.x; i < kBlockQ; i += kThreads) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
  }

  const int row0 = warp * 16;  // this warp's rows of every tile
  for (int64_t k0 = 0; k0 < n_keys; k0 += kBlockK) {
    const int k_rows = static_cast<int>(min_i64(kBlockK, n_keys - k0));
    __syncthreads();  // every warp is done with the previous K/V tile (and the Q tile / init is written)
    load_tile<T, kHeadDim>(k_tile, kBlockK, k_rows, [&](int r) {
      return store.row(p.layer, 0, k0 + r) + int64_t{kv_head} * kHeadDim;
    });
    load_tile<T, kHeadDim>(v_tile, kBlockK, k_rows, [&](int r) {
      return store.row(p.layer, 1, k0 + r) + int64_t{kv_head} * kHeadDim;
    });
    __syncthreads();

    // S = Q K^T for this warp's 16 rows. K^T as a col-major matrix_b: element
    // (dim, key) at k_tile[key * pitch + dim].
    for (int j = 0; j < kBlockK / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_frag;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> k_frag;
        wmma::load_matrix_sync(q_frag, q_tile + row0 * S::kPitchT + kk * 16, S::kPitchT);
        wmma::load_matrix_sync(k_frag, k_tile + j * 16 * S::kPitchT + kk * 16, S::kPitchT);
        wmma::mma_sync(s_frag, q_frag, k_frag, s_frag);
      }
      wmma::store_matrix_sync(s_tile + row0 * S::kPitchS + j * 16, s_frag, S::kPitchS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the warp's rows; lane owns columns lane and lane + 32.
    for (int rr = 0; rr < 16; ++rr) {
      const int r = row0 + rr;
      const int64_t query_pos = p.pos0 + q0 + r;  // valid only when r < q_rows
      float scores[2];
      for (int half = 0; half < 2; ++half) {
        const int c = lane + 32 * half;
        const bool visible = r < q_rows && k0 + c <= query_pos;
        scores[half] = visible ? s_tile[r * S::kPitchS + c] * p.scale : -INFINITY;
      }
      const float old_max = row_max[r];
      const float new_max = fmaxf(old_max, warp_max(fmaxf(scores[0], scores[1])));
      float probs[2] = {0.0f, 0.0f};
      float alpha = 1.0f;
      if (new_max != -INFINITY) {  // -inf only for the padding rows past n_queries
        probs[0] = expf(scores[0] - new_max);
        probs[1] = expf(scores[1] - new_max);
        alpha = expf(old_max - new_max);
      }
      const float tile_sum = warp_sum(probs[0] + probs[1]);
      p_tile[r * S::kPitchP + lane] = from_float<T>(probs[0]);
      p_tile[r * S::kPitchP + lane + 32] = from_float<T>(probs[1]);
      for (int c = lane; c < kHeadDim; c += 32) o_acc[r * S::kPitchO + c] *= alpha;
      __syncwarp();  // every lane has read row_max[r] before lane 0 moves it
      if (lane == 0) {
        row_max[r] = new_max;
        row_sum[r] = row_sum[r] * alpha + tile_sum;
      }
    }
    __syncwarp();

    // O += P V for this warp's rows; V as a row-major matrix_b (key, dim).
    for (int j = 0; j < kHeadDim / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
      wmma::load_matrix_sync(o_frag, o_acc + row0 * S::kPitchO + j * 16, S::kPitchO, wmma::mem_row_major);
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p_frag;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v_frag;
        wmma::load_matrix_sync(p_frag, p_tile + row0 * S::kPitchP + kk * 16, S::kPitchP);
        wmma::load_matrix_sync(v_frag, v_tile + kk * 16 * S::kPitchT + j * 16, S::kPitchT);
        wmma::mma_sync(o_frag, p_frag, v_frag, o_frag);
      }
      wmma::store_matrix_sync(o_acc + row0 * S::kPitchO + j * 16, o_frag, S::kPitchO, wmma::mem_row_major);
    }
    __syncwarp();
  }

  for (int rr = 0; rr < 16; ++rr) {
    const int r = row0 + rr;
    if (r >= q_rows) break;
    const float inverse = 1.0f / row_sum[r];
    T* dst = out + (q0 + r) * q_dim + int64_t{h} * kHeadDim;
    for (int c = lane; c < kHeadDim; c += 32) dst[c] = from_float<T>(o_acc[r * S::kPitchO + c] * inverse);
  }
}

template <typename T, int kHeadDim>
struct WmmaKernel {
  static auto kernel() { return flash_attention_kernel<T, kHeadDim>; }
  static constexpr size_t kSmemBytes = Smem<kHeadDim>::kBytes;
  static constexpr int kBlockQueries = kBlockQ;
  static constexpr int kBlockThreads = kThreads;
};

}  // namespace

cudaError_t launch_flash_attention_wmma(const AttentionParams& params, const void* q, const PagedKvView& kv, void* out,
                                   cudaStream_t stream) {
  return launch_attention_kernel<WmmaKernel>(params, q, kv, out, stream);
}

}  // namespace baton::cuda
