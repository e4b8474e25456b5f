// Each CUDA kernel of the prefill backend against the CPU reference
// (common/cpu/ops.h, the F32 KV cache's attention, the KV codec), with the
// device's 16-bit inputs rounded the same way on the host so the tolerance
// covers only what the kernel itself may change. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "cloud_prefill/cuda/cuda_gemm.h"
#include "cloud_prefill/cuda/cuda_kv_quantize.h"
#include "cloud_prefill/cuda/cuda_kv_block_pool.h"
#include "cloud_prefill/cuda/cuda_ops.h"
#include "common/cpu/matmul.h"
#include "common/cpu/ops.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_codec/kv_quant.h"
#include "cuda_test_util.h"

namespace baton::cuda {
namespace {

using testing::compare;
using testing::random_vector;
using testing::to_device;
using testing::to_host;
using testing::to_host_as_f32;
using testing::Tolerance;

// Exact up to float rounding / summation order.
constexpr Tolerance kFloatTol{1e-6, 1e-5};
// One rounding to a 16-bit output type.
Tolerance rounding_tol(CudaDType t) {
  return t == CudaDType::kF32 ? kFloatTol : t == CudaDType::kF16 ? Tolerance{1e-3, 1e-3} : Tolerance{4e-3, 8e-3};
}

class OutputTypeTest : public ::testing::TestWithParam<CudaDType> {};
INSTANTIATE_TEST_SUITE_P(Types, OutputTypeTest,
                         ::testing::Values(CudaDType::kF32, CudaDType::kF16, CudaDType::kBF16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

TEST_P(OutputTypeTest, RmsNormMatchesCpu) {
  BATON_REQUIRE_GPU();
  const CudaDType t = GetParam();
  const int rows = 7, n = 1000;
  const auto x = random_vector(rows * n, 1, 3.0f);
  const auto weight = random_vector(n, 2);
  std::vector<float> want(rows * n);
  rmsnorm_rows(x.data(), weight.data(), want.data(), rows, n, 1e-5f);
  auto dx = to_device(x), dw = to_device(weight);
  DeviceMemory out;
  BATON_ASSERT_OK(out.reserve(rows * n * dtype_bytes(t)));
  ASSERT_EQ(launch_rmsnorm(dx.as<float>(), dw.as<float>(), rows, n, 1e-5f, t, out.get(), nullptr), cudaSuccess);
  BATON_EXPECT_CLOSE(compare(to_host_as_f32(t, out, rows * n), want), rounding_tol(t), "rmsnorm");
}

TEST_P(OutputTypeTest, SwigluMatchesCpu) {
  BATON_REQUIRE_GPU();
  const CudaDType t = GetParam();
  const int rows = 5, n_ff = 300;
  const auto gate_up = random_vector(rows * 2 * n_ff, 3, 2.0f);
  std::vector<float> want(rows * n_ff);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> gate(gate_up.begin() + r * 2 * n_ff, gate_up.begin() + r * 2 * n_ff + n_ff);
    silu_mul(gate.data(), gate_up.data() + r * 2 * n_ff + n_ff, n_ff);
    std::copy(gate.begin(), gate.end(), want.begin() + r * n_ff);
  }
  auto dgu = to_device(gate_up);
  DeviceMemory out;
  BATON_ASSERT_OK(out.reserve(rows * n_ff * dtype_bytes(t)));
  ASSERT_EQ(launch_swiglu(CudaDType::kF32, dgu.get(), rows, n_ff, t, out.get(), nullptr), cudaSuccess);
  // expf on the device is within 2 ulp of the host's.
  const Tolerance tol = t == CudaDType::kF32 ? Tolerance{1e-6, 1e-5} : rounding_tol(t);
  BATON_EXPECT_CLOSE(compare(to_host_as_f32(t, out, rows * n_ff), want), tol, "swiglu");
  if (t == CudaDType::kF32) return;
  // 16-bit input (the backend's gate|up GEMM output): the CPU sees the same rounded values.
  std::vector<float> rounded = gate_up;
  for (float& v : rounded) v = testing::round_to(t, v);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> gate(rounded.begin() + r * 2 * n_ff, rounded.begin() + r * 2 * n_ff + n_ff);
    silu_mul(gate.data(), rounded.data() + r * 2 * n_ff + n_ff, n_ff);
    std::copy(gate.begin(), gate.end(), want.begin() + r * n_ff);
  }
  auto dgu16 = to_device(testing::to_16bit(t, gate_up));
  ASSERT_EQ(launch_swiglu(t, dgu16.get(), rows, n_ff, t, out.get(), nullptr), cudaSuccess);
  BATON_EXPECT_CLOSE(compare(to_host_as_f32(t, out, rows * n_ff), want), tol, "swiglu, 16-bit input");
}

TEST(CudaKernels, EmbeddingGatherCopiesRowsExactly) {
  BATON_REQUIRE_GPU();
  for (CudaDType t : {CudaDType::kF16, CudaDType::kBF16}) {
    const int n_vocab = 50, n_embd = 96;
    const auto table = testing::to_16bit(t, random_vector(n_vocab * n_embd, 4));
    const std::vector<int32_t> tokens = {3, 0, 49, 3, 17};
    auto dtable = to_device(table), dtokens = to_device(tokens);
    DeviceMemory x;
    BATON_ASSERT_OK(x.reserve(tokens.size() * n_embd * sizeof(float)));
    ASSERT_EQ(launch_embedding_gather(t, dtable.get(), dtokens.as<int32_t>(), tokens.size(), n_embd, x.as<float>(),
                                      nullptr),
              cudaSuccess);
    const auto got = to_host<float>(x, tokens.size() * n_embd);
    const auto all = testing::from_16bit(t, table);
    for (size_t i = 0; i < tokens.size(); ++i) {
      for (int c = 0; c < n_embd; ++c) {
        ASSERT_EQ(got[i * n_embd + c], all[tokens[i] * n_embd + c]) << dtype_name(t) << " token " << i;
      }
    }
  }
}

TEST(CudaKernels, GemmMatchesCpuMatmulAndAddsIntoY) {
  BATON_REQUIRE_GPU();
  for (CudaDType t : {CudaDType::kF16, CudaDType::kBF16}) {
    const int rows = 48, cols = 96, n = 10;
    const auto w16 = testing::to_16bit(t, random_vector(rows * cols, 5, 0.1f));
    const auto x16 = testing::to_16bit(t, random_vector(n * cols, 6));
    const auto y0 = random_vector(n * rows, 7);
    // CPU: the same rounded values in f32.
    const auto wf = testing::from_16bit(t, w16), xf = testing::from_16bit(t, x16);
    std::vector<float> want(n * rows);
    matmul(WeightMatrix{GgmlType::kF32, wf.data(), rows, cols}, xf.data(), n, want.data(), nullptr);
    for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
    auto dw = to_device(w16), dx = to_device(x16), dy = to_device(y0);
    cublasHandle_t handle = nullptr;
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
    BATON_ASSERT_OK(gemm_xwt(handle, t, dw.get(), rows, cols, dx.get(), n, CudaDType::kF32, dy.get(), 1.0f));
    BATON_EXPECT_CLOSE(compare(to_host<float>(dy, n * rows), want), (Tolerance{2e-4, 2e-3}), dtype_name(t));
    // A 16-bit output: the f32 result rounded once.
    std::vector<float> want16(n * rows);
    matmul(WeightMatrix{GgmlType::kF32, wf.data(), rows, cols}, xf.data(), n, want16.data(), nullptr);
    DeviceMemory y16;
    BATON_ASSERT_OK(y16.reserve(n * rows * 2));
    BATON_ASSERT_OK(gemm_xwt(handle, t, dw.get(), rows, cols, dx.get(), n, t, y16.get(), 0.0f));
    BATON_EXPECT_CLOSE(compare(to_host_as_f32(t, y16, n * rows), want16), rounding_tol(t), dtype_name(t));
    cublasDestroy(handle);
  }
}

// A paged device KV for kernel tests: blocks of a pool handed out in a
// shuffled order, so positions that are neighbours live in distant blocks.
struct TestKv {
  std::unique_ptr<CudaKvBlockPool> pool;
  std::vector<int32_t> blocks;
  DeviceMemory table;
  PagedKvView view;

  TestKv(CudaDType t, int n_layer, int kv_dim, int block_tokens, int64_t n_positions) {
    PagedKvView layout;
    layout.dtype = t;
    layout.n_layer = n_layer;
    layout.kv_dim = kv_dim;
    layout.block_tokens = block_tokens;
    const int64_t n_blocks = (n_positions + block_tokens - 1) / block_tokens;
    auto p = CudaKvBlockPool::Create(layout, n_blocks + 3);
    BATON_CHECK(p.ok(), "pool");
    pool = std::move(*p);
    BATON_CHECK(pool->allocate(n_blocks + 3, blocks).ok());
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(11));
    table = to_device(blocks);
    view = pool->layout();
    view.block_table = table.as<int32_t>();
  }
  // K (kind 0) or V row of (layer, pos) read back as f32.
  std::vector<float> row(int layer, int kind, int64_t pos) const {
    const int64_t block = blocks[pos / view.block_tokens];
    const int64_t offset = block * view.block_elements() +
                           ((int64_t{layer} * 2 + kind) * view.block_tokens + pos % view.block_tokens) * view.kv_dim;
    std::vector<uint16_t> raw(view.kv_dim);
    BATON_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    BATON_CHECK(cudaMemcpy(raw.data(), static_cast<const uint16_t*>(view.pool) + offset, raw.size() * 2,
                           cudaMemcpyDeviceToHost) == cudaSuccess);
    return testing::from_16bit(view.dtype, raw);
  }
};

struct RopeCase {
  bool neox;
  bool bias;
  int n_rot;  // < head_dim: partial rotation
};

class QkvRopeTest : public ::testing::TestWithParam<RopeCase> {};
INSTANTIATE_TEST_SUITE_P(Cases, QkvRopeTest,
                         ::testing::Values(RopeCase{false, false, 32}, RopeCase{true, true, 32},
                                           RopeCase{false, true, 16}, RopeCase{true, false, 16}),
                         [](const auto& param_info) {
                           return absl::StrFormat("%s_%s_rot%d", param_info.param.neox ? "neox" : "norm",
                                                  param_info.param.bias ? "bias" : "nobias", param_info.param.n_rot);
                         });

TEST_P(QkvRopeTest, BiasAndRopeMatchCpuAndFillThePagedStore) {
  BATON_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const int n_head = 4, n_head_kv = 2, head_dim = 32, n = 9, layer = 1;
  const int64_t pos0 = 30000;  // large angles: the double-precision path matters
  const int q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim, width = q_dim + 2 * kv_dim;
  const auto qkv = random_vector(n * width, 8);
  const auto bias = random_vector(width, 9);
  std::vector<float> inv_freq(c.n_rot / 2);
  for (int i = 0; i < c.n_rot / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.n_rot);
  // CPU: bias, then rope_rows on q and k.
  std::vector<float> q(n * q_dim), k(n * kv_dim), v(n * kv_dim);
  for (int t = 0; t < n; ++t) {
    for (int e = 0; e < width; ++e) {
      const float value = qkv[t * width + e] + (c.bias ? bias[e] : 0.0f);
      if (e < q_dim) q[t * q_dim + e] = value;
      else if (e < q_dim + kv_dim) k[t * kv_dim + e - q_dim] = value;
      else v[t * kv_dim + e - q_dim - kv_dim] = value;
    }
  }
  rope_rows(q.data(), n, n_head, head_dim, c.n_rot, c.neox, pos0, inv_freq.data());
  rope_rows(k.data(), n, n_head_kv, head_dim, c.n_rot, c.neox, pos0, inv_freq.data());

  TestKv kv(CudaDType::kBF16, 2, kv_dim, 4, pos0 + n);
  auto dqkv = to_device(qkv), dbias = to_device(bias), dfreq = to_device(inv_freq);
  DeviceMemory dq, dk, dv;
  BATON_ASSERT_OK(dq.reserve(n * q_dim * 4));
  BATON_ASSERT_OK(dk.reserve(n * kv_dim * 4));
  BATON_ASSERT_OK(dv.reserve(n * kv_dim * 4));
  QkvRopeParams p;
  p.n_tokens = n;
  p.pos0 = pos0;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.n_rot = c.n_rot;
  p.neox = c.neox;
  p.inv_freq = dfreq.as<float>();
  p.bias = c.bias ? dbias.as<float>() : nullptr;
  p.layer = layer;
  ASSERT_EQ(launch_qkv_bias_rope(p, dqkv.as<float>(), CudaDType::kF32, dq.get(), dk.as<float>(), dv.as<float>(),
                                 kv.view, nullptr),
            cudaSuccess);
  BATON_EXPECT_CLOSE(compare(to_host<float>(dq, n * q_dim), q), kFloatTol, "q");
  BATON_EXPECT_CLOSE(compare(to_host<float>(dk, n * kv_dim), k), kFloatTol, "k");
  BATON_EXPECT_CLOSE(compare(to_host<float>(dv, n * kv_dim), v), kFloatTol, "v");
  for (int t = 0; t < n; ++t) {
    const std::vector<float> want_k(k.begin() + t * kv_dim, k.begin() + (t + 1) * kv_dim);
    const std::vector<float> want_v(v.begin() + t * kv_dim, v.begin() + (t + 1) * kv_dim);
    BATON_EXPECT_CLOSE(compare(kv.row(layer, 0, pos0 + t), want_k), rounding_tol(CudaDType::kBF16), "paged k");
    BATON_EXPECT_CLOSE(compare(kv.row(layer, 1, pos0 + t), want_v), rounding_tol(CudaDType::kBF16), "paged v");
  }
}

enum class Kernel { kFlash, kPipelined, kWmma, kSimple };
const char* kernel_name(Kernel k) {
  return k == Kernel::kFlash ? "flash" : k == Kernel::kPipelined ? "pipelined" : k == Kernel::kWmma ? "wmma" : "simple";
}

struct AttentionCase {
  CudaDType dtype;
  int head_dim;
  int64_t pos0;       // keys of earlier chunks
  int64_t n_queries;
  Kernel kernel;
};

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};
INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest,
    ::testing::Values(AttentionCase{CudaDType::kBF16, 64, 0, 100, Kernel::kFlash},
                      AttentionCase{CudaDType::kBF16, 64, 0, 100, Kernel::kPipelined},
                      AttentionCase{CudaDType::kF16, 128, 70, 130, Kernel::kPipelined},
                      AttentionCase{CudaDType::kBF16, 16, 300, 64, Kernel::kPipelined},
                      AttentionCase{CudaDType::kF16, 32, 5, 1, Kernel::kPipelined},
                      AttentionCase{CudaDType::kBF16, 128, 1000, 300, Kernel::kPipelined},
                      AttentionCase{CudaDType::kF16, 64, 2000, 700, Kernel::kPipelined},
                      AttentionCase{CudaDType::kF16, 128, 4000, 1000, Kernel::kPipelined},
                      AttentionCase{CudaDType::kF16, 128, 4000, 1000, Kernel::kFlash},
                      AttentionCase{CudaDType::kBF16, 64, 0, 100, Kernel::kWmma},
                      AttentionCase{CudaDType::kBF16, 64, 0, 100, Kernel::kSimple},
                      AttentionCase{CudaDType::kF16, 128, 70, 130, Kernel::kFlash},
                      AttentionCase{CudaDType::kF16, 128, 70, 130, Kernel::kWmma},
                      AttentionCase{CudaDType::kF16, 128, 70, 130, Kernel::kSimple},
                      AttentionCase{CudaDType::kBF16, 16, 300, 64, Kernel::kFlash},
                      AttentionCase{CudaDType::kBF16, 16, 300, 64, Kernel::kWmma},
                      AttentionCase{CudaDType::kF16, 32, 5, 1, Kernel::kFlash},
                      AttentionCase{CudaDType::kF16, 32, 5, 1, Kernel::kWmma},
                      AttentionCase{CudaDType::kBF16, 128, 1000, 300, Kernel::kFlash},
                      AttentionCase{CudaDType::kBF16, 128, 1000, 300, Kernel::kWmma},
                      AttentionCase{CudaDType::kF16, 64, 2000, 700, Kernel::kFlash},
                      AttentionCase{CudaDType::kBF16, 80, 33, 47, Kernel::kSimple}),
    [](const auto& param_info) {
      const AttentionCase& c = param_info.param;
      return absl::StrFormat("%s_hd%d_pos%d_n%d_%s", dtype_name(c.dtype), c.head_dim, c.pos0, c.n_queries,
                             kernel_name(c.kernel));
    });

TEST_P(AttentionTest, MatchesTheF32CacheOverEarlierAndCurrentChunk) {
  BATON_REQUIRE_GPU();
  const AttentionCase c = GetParam();
  const int n_head = 4, n_head_kv = 2, layer = 1, n_layer = 2;  // GQA: 2 query heads per kv head
  const int q_dim = n_head * c.head_dim, kv_dim = n_head_kv * c.head_dim;
  const int64_t n_keys = c.pos0 + c.n_queries;
  // Inputs rounded to the device type, so the CPU sees what the device holds.
  auto round_all = [&](std::vector<float> v) {
    for (float& x : v) x = testing::round_to(c.dtype, x);
    return v;
  };
  const auto k = round_all(random_vector(n_keys * kv_dim, 12, 1.5f));
  const auto v = round_all(random_vector(n_keys * kv_dim, 13));
  const auto q = round_all(random_vector(c.n_queries * q_dim, 14, 1.5f));

  F32KvCache cpu(KvGeometry{n_layer, n_head, n_head_kv, c.head_dim, {}}, n_keys);
  BATON_ASSERT_OK(cpu.store(layer, 0, n_keys, k.data(), v.data()));
  std::vector<float> want(c.n_queries * q_dim);
  cpu.attend(layer, c.pos0, c.n_queries, q.data(), want.data(), nullptr);

  TestKv kv(c.dtype, n_layer, kv_dim, 16, n_keys);
  auto dk = to_device(k), dv = to_device(v);
  ASSERT_EQ(launch_kv_store(dk.as<float>(), dv.as<float>(), n_keys, 0, layer, kv.view, nullptr), cudaSuccess);
  auto dq = to_device(testing::to_16bit(c.dtype, q));
  DeviceMemory out;
  BATON_ASSERT_OK(out.reserve(c.n_queries * q_dim * 2));
  AttentionParams p;
  p.n_queries = c.n_queries;
  p.pos0 = c.pos0;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = c.head_dim;
  p.layer = layer;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const cudaError_t launched =
      c.kernel == Kernel::kFlash       ? launch_flash_attention(p, dq.get(), kv.view, out.get(), nullptr)
      : c.kernel == Kernel::kPipelined ? launch_flash_attention_pipelined(p, dq.get(), kv.view, out.get(), nullptr)
      : c.kernel == Kernel::kWmma      ? launch_flash_attention_wmma(p, dq.get(), kv.view, out.get(), nullptr)
                                       : launch_attention_simple(p, dq.get(), kv.view, out.get(), nullptr);
  ASSERT_EQ(launched, cudaSuccess);
  // Probabilities are rounded to the 16-bit type before P V (flash, wmma),
  // and the output once: a few roundings of the type.
  const Tolerance tol = c.dtype == CudaDType::kF16 ? Tolerance{2e-3, 4e-3} : Tolerance{1e-2, 2e-2};
  BATON_EXPECT_CLOSE(compare(to_host_as_f32(c.dtype, out, c.n_queries * q_dim), want), tol, "attention");
}

TEST(CudaKernels, Int8KvQuantizationMatchesTheCodecByteForByte) {
  BATON_REQUIRE_GPU();
  const KvGeometry g{1, 4, 2, 64, {}};
  const int64_t n_tokens = 37;
  const int64_t n = n_tokens * g.kv_dim();
  auto x = random_vector(n, 15, 2.0f);
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;                // an all-zero group
  for (int i = 0; i < 32; ++i) x[256 + i] = (i - 16) * 0.5f;  // codes landing on .5
  x[500] = 60000.0f;                                            // a large scale
  for (int group : {32, 64}) {
    const int64_t n_groups = n / group;
    std::vector<int8_t> want_codes(n);
    std::vector<uint16_t> want_scales(n_groups);
    kv_quant::quantize_int8_groups(x.data(), n, group, want_codes.data(), want_scales.data());
    auto dx = to_device(x);
    DeviceMemory codes, scales;
    BATON_ASSERT_OK(codes.reserve(n));
    BATON_ASSERT_OK(scales.reserve(n_groups * 2));
    ASSERT_EQ(launch_quantize_int8_groups(dx.as<float>(), n, group, codes.as<int8_t>(), scales.as<uint16_t>(), nullptr),
              cudaSuccess);
    const auto got_codes = to_host<int8_t>(codes, n);
    const auto got_scales = to_host<uint16_t>(scales, n_groups);
    EXPECT_EQ(got_codes, want_codes) << "group " << group;
    EXPECT_EQ(got_scales, want_scales) << "group " << group;

    // The same bytes on the wire: the device's block through the codec's
    // layout + zstd equals the CPU encoder's output.
    auto config = parse_kv_codec_config(absl::StrFormat("int8-g%d-z3", group));
    ASSERT_TRUE(config.ok()) << config.status();
    QuantizedKvBlock block;
    block.n_tokens = n_tokens;
    block.codes.assign(reinterpret_cast<const uint8_t*>(got_codes.data()),
                       reinterpret_cast<const uint8_t*>(got_codes.data()) + n);
    block.scales = got_scales;
    auto from_gpu = encode_quantized_kv_block(*config, g, /*is_key=*/false, block);
    auto from_cpu = encode_kv_block(*config, g, /*is_key=*/false, x.data(), n_tokens);
    ASSERT_TRUE(from_gpu.ok()) << from_gpu.status();
    ASSERT_TRUE(from_cpu.ok()) << from_cpu.status();
    EXPECT_EQ(from_gpu->payload, from_cpu->payload);
    EXPECT_EQ(from_gpu->raw_size, from_cpu->raw_size);
  }
}

}  // namespace
}  // namespace baton::cuda

namespace baton::cuda {
namespace {

TEST(CudaKvQuantize, BlocksEncodeToTheCpuCodecBytes) {
  BATON_REQUIRE_GPU();
  const KvGeometry g{2, 8, 2, 64, {}};
  const int64_t n_tokens = 45;
  const auto rows = testing::random_vector(n_tokens * g.kv_dim(), 16, 3.0f);
  auto device_rows = testing::to_device(rows);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const char* name : {"int8-g32-z3", "int8-g64", "int8-g16-rows-z1", "f16-z3", "int8-pc-kg128-g32-z3"}) {
    auto config = parse_kv_codec_config(name);
    ASSERT_TRUE(config.ok()) << config.status();
    for (bool is_key : {true, false}) {
      auto gpu = quantize_kv_block_on_device(*config, g, is_key, device_rows.as<float>(), n_tokens, stream);
      if (is_key && config->key_axis == KvCodecConfig::KeyAxis::kPerChannel) {
        EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented) << name;
        continue;
      }
      ASSERT_TRUE(gpu.ok()) << name << ": " << gpu.status();
      auto cpu = quantize_kv_block(*config, g, is_key, rows.data(), n_tokens);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      EXPECT_EQ(gpu->codes, cpu->codes) << name << (is_key ? " keys" : " values");
      EXPECT_EQ(gpu->scales, cpu->scales) << name << (is_key ? " keys" : " values");
      auto gpu_bytes = encode_quantized_kv_block(*config, g, is_key, *gpu);
      auto cpu_bytes = encode_kv_block(*config, g, is_key, rows.data(), n_tokens);
      ASSERT_TRUE(gpu_bytes.ok() && cpu_bytes.ok());
      EXPECT_EQ(gpu_bytes->payload, cpu_bytes->payload) << name;
    }
  }
  auto int4 = parse_kv_codec_config("int4-g32");
  ASSERT_TRUE(int4.ok());
  EXPECT_EQ(quantize_kv_block_on_device(*int4, g, false, device_rows.as<float>(), n_tokens, stream).status().code(),
            absl::StatusCode::kUnimplemented);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace baton::cuda
