// The whole CUDA prefill against the CPU: per-layer K/V in the host cache and
// the last token's logits, for tiny shapes (against ReferenceEngine, the
// golden F32 forward pass) and for real shapes (llama-3.2-1b, llama-3.2-3b,
// qwen2.5-0.5b with their real widths and vocabularies but generated with 2
// layers to keep the CPU side and the synthesis short; against the CPU Engine
// on F16 weights, which computes in F32). Then what the service relies on:
// chunked equals one-shot, a prefix from the host, rollback, cancellation,
// capacity errors, several backends sharing weights. Skips without a GPU.
//
// Tolerances (relative RMS of the error / largest error over largest |ref|):
//   F16 compute (F16 weights exact, activations rounded to F16 per GEMM): 5e-3 / 3e-2
//   BF16 compute (weights and activations rounded to BF16):             3e-2 / 1e-1
// A wrong pairing, position, head mapping or mask gives errors of order 1.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/engine/reference_engine.h"
#include "cuda_test_util.h"

namespace baton::cuda {
namespace {

using testing::compare;
using testing::ErrorStats;
using testing::Tolerance;

Tolerance tolerance_for(CudaDType t) { return t == CudaDType::kF16 ? Tolerance{5e-3, 3e-2} : Tolerance{3e-2, 1e-1}; }
// Two GPU runs of the same math (different chunking / GEMM shapes).
constexpr Tolerance kSameMath{2e-3, 2e-2};

std::vector<int32_t> prompt_tokens(int64_t n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return tokens;
}

KvGeometry geometry_of(const Model& model) {
  const ModelSpec& s = model.spec();
  return KvGeometry{s.n_layer, s.n_head, s.n_head_kv, s.head_dim, {}};
}

// K (kind 0) or V of one layer for tokens [from, to) compared between caches.
ErrorStats compare_layer(const F32KvCache& got, const F32KvCache& want, int layer, int kind, int64_t from,
                         int64_t to) {
  ErrorStats e;
  const int64_t kv_dim = want.geometry().kv_dim();
  for (int64_t t = from; t < to; ++t) {
    const float* g = kind == 0 ? got.k_row(layer, t) : got.v_row(layer, t);
    const float* w = kind == 0 ? want.k_row(layer, t) : want.v_row(layer, t);
    for (int64_t i = 0; i < kv_dim; ++i) e.add(g[i], w[i]);
  }
  return e;
}

void expect_kv_close(const F32KvCache& got, const F32KvCache& want, int64_t from, int64_t to, Tolerance tol,
                     const std::string& what) {
  for (int layer = 0; layer < want.geometry().n_layer; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      BATON_EXPECT_CLOSE(compare_layer(got, want, layer, kind, from, to), tol,
                         absl::StrFormat("%s: layer %d %s", what, layer, kind == 0 ? "K" : "V"));
    }
  }
}

// The CPU result of a prompt: K/V of every layer and the last logits.
struct CpuResult {
  std::unique_ptr<F32KvCache> kv;
  std::vector<float> last_logits;
};

CpuResult cpu_prefill(const Model& model, const std::vector<int32_t>& tokens, bool golden) {
  CpuResult r;
  r.kv = std::make_unique<F32KvCache>(geometry_of(model), static_cast<int64_t>(tokens.size()));
  if (golden) {
    ReferenceEngine ref(model);
    for (int32_t t : tokens) r.last_logits = ref.forward(t);
    for (int layer = 0; layer < model.spec().n_layer; ++layer) {
      for (size_t t = 0; t < tokens.size(); ++t) {
        EXPECT_TRUE(r.kv->store(layer, t, 1, ref.k(layer, t).data(), ref.v(layer, t).data()).ok());
      }
    }
    r.kv->set_size(static_cast<int64_t>(tokens.size()));
  } else {
    Engine engine(model, EngineOptions{0, 64});
    EXPECT_TRUE(engine.prefill(tokens, *r.kv, &r.last_logits).ok());
  }
  return r;
}

struct ModelCase {
  std::string shape;
  int n_layer;        // 0: the shape's
  GgmlType type;
  int64_t n_tokens;
  std::string attention;
  bool golden;        // ReferenceEngine (tiny) or the CPU Engine (big shapes, F16 weights)
};

class CudaPrefillVsCpu : public ::testing::TestWithParam<ModelCase> {};
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaPrefillVsCpu,
    ::testing::Values(ModelCase{"tiny", 0, GgmlType::kF16, 150, "flash", true},
                      ModelCase{"tiny", 0, GgmlType::kF16, 150, "simple", true},
                      ModelCase{"tiny", 0, GgmlType::kF16, 150, "wmma", true},
                      ModelCase{"tiny", 0, GgmlType::kF16, 150, "pipelined", true},
                      ModelCase{"tiny-qwen2", 0, GgmlType::kBF16, 100, "pipelined", true},
                      ModelCase{"tiny-qwen2", 0, GgmlType::kF16, 150, "flash", true},
                      ModelCase{"tiny-llama3", 0, GgmlType::kF16, 150, "flash", true},
                      ModelCase{"tiny", 0, GgmlType::kQ8_0, 100, "flash", true},
                      ModelCase{"tiny", 0, GgmlType::kQ4_0, 100, "flash", true},
                      ModelCase{"tiny-qwen2", 0, GgmlType::kBF16, 100, "flash", true},
                      ModelCase{"llama-3.2-1b", 2, GgmlType::kF16, 200, "flash", false},
                      ModelCase{"llama-3.2-3b", 2, GgmlType::kF16, 130, "flash", false},
                      ModelCase{"llama-3.2-1b", 2, GgmlType::kF16, 200, "pipelined", false},
                      ModelCase{"llama-3.2-3b", 2, GgmlType::kF16, 300, "pipelined", false},
                      ModelCase{"qwen2.5-0.5b", 2, GgmlType::kF16, 200, "flash", false},
                      ModelCase{"qwen2.5-0.5b", 2, GgmlType::kF16, 200, "pipelined", false}),
    [](const auto& param_info) {
      const ModelCase& c = param_info.param;
      std::string name = absl::StrFormat("%s_L%d_%s_%s", c.shape, c.n_layer, std::string(ggml_type_name(c.type)),
                                         c.attention);
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST_P(CudaPrefillVsCpu, LayerKvAndLogitsMatchTheCpu) {
  BATON_REQUIRE_GPU();
  const ModelCase c = GetParam();
  auto model = Model::Load(testing::synth_model(c.shape, c.n_layer, c.type));
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> tokens = prompt_tokens(c.n_tokens, (*model)->spec().n_vocab, 21);
  const CpuResult want = cpu_prefill(**model, tokens, c.golden);

  CudaBackendOptions options;
  options.attention = c.attention;
  options.kv_pool_tokens = 4096;
  options.kv_block_tokens = 64;
  auto backend = make_cuda_prefill_backend(**model, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const CudaDType dtype = (*backend)->shared().weights->dtype();
  EXPECT_EQ(dtype, c.type == GgmlType::kF16 ? CudaDType::kF16 : CudaDType::kBF16);

  F32KvCache got(geometry_of(**model), c.n_tokens);
  // Layer L's rows must be in the host cache when layer_done(L) runs: keep a
  // copy of them at that moment and compare it with the final cache.
  std::vector<int> done_order;
  std::vector<std::vector<float>> k_at_done;
  const int64_t kv_dim = got.geometry().kv_dim();
  auto layer_done = [&](int layer) {
    done_order.push_back(layer);
    k_at_done.emplace_back(got.k_row(layer, 0), got.k_row(layer, 0) + c.n_tokens * kv_dim);
    return absl::OkStatus();
  };
  std::vector<float> logits;
  (*backend)->begin_sequence();
  BATON_ASSERT_OK((*backend)->prefill_with_logits(tokens, got, layer_done, &logits));
  EXPECT_EQ(got.size(), c.n_tokens);
  EXPECT_EQ((*backend)->device_tokens(), c.n_tokens);

  std::vector<int> expected_order((*model)->spec().n_layer);
  std::iota(expected_order.begin(), expected_order.end(), 0);
  EXPECT_EQ(done_order, expected_order);
  for (size_t layer = 0; layer < k_at_done.size(); ++layer) {
    EXPECT_EQ(0, std::memcmp(k_at_done[layer].data(), got.k_row(static_cast<int>(layer), 0),
                             k_at_done[layer].size() * sizeof(float)))
        << "layer " << layer << "'s K changed after its layer_done";
  }
  const Tolerance tol = tolerance_for(dtype);
  expect_kv_close(got, *want.kv, 0, c.n_tokens, tol, (*backend)->name());
  BATON_EXPECT_CLOSE(compare(logits, want.last_logits), tol, "last logits");
}

// A small model with sub-batches of 32 tokens and blocks of 16 positions, so
// chunks cross both boundaries.
class CudaPrefillChunks : public ::testing::Test {
 protected:
  void SetUp() override {
    BATON_REQUIRE_GPU();
    auto model = Model::Load(testing::synth_model("tiny-qwen2", 0, GgmlType::kF16));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    options_.max_batch_tokens = 32;
    options_.kv_block_tokens = 16;
    options_.kv_pool_tokens = 1024;
    tokens_ = prompt_tokens(150, model_->spec().n_vocab, 5);
  }

  std::unique_ptr<F32KvCache> new_cache() const {
    return std::make_unique<F32KvCache>(geometry_of(*model_), 256);
  }
  std::span<const int32_t> range(int64_t from, int64_t to) const {
    return std::span<const int32_t>(tokens_.data() + from, static_cast<size_t>(to - from));
  }
  // Three chunks (64, 51, 35 tokens) against one shot, K/V and logits.
  void chunked_equals_one_shot();
  // One-shot prefill of all tokens by a fresh backend.
  void one_shot(F32KvCache& kv, std::vector<float>& logits) {
    auto backend = make_cuda_prefill_backend(*model_, options_);
    ASSERT_TRUE(backend.ok()) << backend.status();
    BATON_ASSERT_OK((*backend)->prefill_with_logits(tokens_, kv, nullptr, &logits));
  }

  std::unique_ptr<Model> model_;
  CudaBackendOptions options_;
  std::vector<int32_t> tokens_;
};

TEST_F(CudaPrefillChunks, ChunkedEqualsOneShot) { chunked_equals_one_shot(); }

// The same with the first flash kernel (the fixture's default is the
// pipelined one): paged blocks of 16 positions, so a 64-key tile spans four
// of them, and chunks that start mid-tile.
TEST_F(CudaPrefillChunks, ChunkedEqualsOneShotWithTheFlashKernel) {
  options_.attention = "flash";
  chunked_equals_one_shot();
}

void CudaPrefillChunks::chunked_equals_one_shot() {
  auto whole = new_cache();
  std::vector<float> whole_logits;
  one_shot(*whole, whole_logits);

  auto backend = make_cuda_prefill_backend(*model_, options_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto chunked = new_cache();
  std::vector<float> logits;
  (*backend)->begin_sequence();
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(0, 64), *chunked, nullptr, nullptr));
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(64, 115), *chunked, nullptr, nullptr));
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(115, 150), *chunked, nullptr, &logits));
  EXPECT_EQ(chunked->size(), 150);
  expect_kv_close(*chunked, *whole, 0, 150, kSameMath, "chunked vs one-shot");
  BATON_EXPECT_CLOSE(compare(logits, whole_logits), kSameMath, "logits");
}

TEST_F(CudaPrefillChunks, ContinuesFromAHostPrefixAfterBeginSequence) {
  auto whole = new_cache();
  std::vector<float> whole_logits;
  one_shot(*whole, whole_logits);

  // The host cache holds [0, 100) from an earlier request; a backend that has
  // never seen them continues the sequence.
  auto kv = new_cache();
  {
    auto first = make_cuda_prefill_backend(*model_, options_);
    ASSERT_TRUE(first.ok()) << first.status();
    BATON_ASSERT_OK((*first)->prefill(range(0, 100), *kv, nullptr));
  }
  auto backend = make_cuda_prefill_backend(*model_, options_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  (*backend)->begin_sequence();
  std::vector<float> logits;
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(100, 150), *kv, nullptr, &logits));
  expect_kv_close(*kv, *whole, 100, 150, kSameMath, "after a host prefix");
  BATON_EXPECT_CLOSE(compare(logits, whole_logits), kSameMath, "logits");
}

TEST_F(CudaPrefillChunks, FollowsAHostRollback) {
  auto whole = new_cache();
  std::vector<float> whole_logits;
  one_shot(*whole, whole_logits);

  auto backend = make_cuda_prefill_backend(*model_, options_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto kv = new_cache();
  // Positions [60, 100) first hold other tokens, then the host rolls back to 60.
  std::vector<int32_t> wrong(tokens_.begin(), tokens_.begin() + 100);
  for (size_t i = 60; i < wrong.size(); ++i) wrong[i] = (wrong[i] + 7) % model_->spec().n_vocab;
  BATON_ASSERT_OK((*backend)->prefill(wrong, *kv, nullptr));
  kv->set_size(60);
  std::vector<float> logits;
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(60, 150), *kv, nullptr, &logits));
  expect_kv_close(*kv, *whole, 0, 150, kSameMath, "after rollback");
  BATON_EXPECT_CLOSE(compare(logits, whole_logits), kSameMath, "logits");
}

TEST_F(CudaPrefillChunks, CancellationLeavesTheCacheSizeAndTheNextPrefillWorks) {
  auto backend = make_cuda_prefill_backend(*model_, options_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto kv = new_cache();
  BATON_ASSERT_OK((*backend)->prefill(range(0, 40), *kv, nullptr));
  int calls = 0;
  const absl::Status cancelled = (*backend)->prefill(range(40, 150), *kv, [&](int layer) {
    ++calls;
    return layer == 0 ? absl::CancelledError("client went away") : absl::OkStatus();
  });
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(kv->size(), 40);
  EXPECT_EQ((*backend)->device_tokens(), 40);

  auto whole = new_cache();
  std::vector<float> whole_logits;
  one_shot(*whole, whole_logits);
  std::vector<float> logits;
  BATON_ASSERT_OK((*backend)->prefill_with_logits(range(40, 150), *kv, nullptr, &logits));
  expect_kv_close(*kv, *whole, 0, 150, kSameMath, "after a cancelled chunk");
}

TEST_F(CudaPrefillChunks, RejectsBadTokensAndFullCachesWithoutChangingThem) {
  auto backend = make_cuda_prefill_backend(*model_, options_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  F32KvCache small(geometry_of(*model_), 100);
  EXPECT_EQ((*backend)->prefill(tokens_, small, nullptr).code(), absl::StatusCode::kResourceExhausted);
  std::vector<int32_t> bad = {1, 2, model_->spec().n_vocab};
  EXPECT_EQ((*backend)->prefill(bad, small, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(small.size(), 0);

  // A device pool of 64 positions cannot hold 150.
  CudaBackendOptions tight = options_;
  tight.kv_pool_tokens = 64;
  auto limited = make_cuda_prefill_backend(*model_, tight);
  ASSERT_TRUE(limited.ok()) << limited.status();
  auto kv = new_cache();
  const absl::Status full = (*limited)->prefill(tokens_, *kv, nullptr);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(kv->size(), 0);
}

TEST_F(CudaPrefillChunks, BackendsOfOneFactoryShareWeightsAndRunConcurrently) {
  auto factory = make_cuda_prefill_backend_factory(options_);
  ASSERT_TRUE(factory.ok()) << factory.status();
  auto a = (*factory)(*model_, 0);
  auto b = (*factory)(*model_, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  auto* ca = dynamic_cast<CudaPrefillBackend*>(a->get());
  auto* cb = dynamic_cast<CudaPrefillBackend*>(b->get());
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(ca->shared().weights.get(), cb->shared().weights.get());
  EXPECT_EQ(ca->shared().kv_pool.get(), cb->shared().kv_pool.get());
  const int64_t all_blocks = ca->shared().kv_pool->n_blocks();

  // Two different prompts at once, each checked against its own one-shot run.
  const std::vector<int32_t> other = prompt_tokens(150, model_->spec().n_vocab, 77);
  auto want_a = new_cache(), want_b = new_cache();
  std::vector<float> ignored;
  one_shot(*want_a, ignored);
  {
    auto single = make_cuda_prefill_backend(*model_, options_);
    ASSERT_TRUE(single.ok()) << single.status();
    BATON_ASSERT_OK((*single)->prefill(other, *want_b, nullptr));
  }
  auto got_a = new_cache(), got_b = new_cache();
  absl::Status status_a, status_b;
  for (int round = 0; round < 3; ++round) {  // blocks are returned and reused between rounds
    got_a->set_size(0);
    got_b->set_size(0);
    ca->begin_sequence();
    cb->begin_sequence();
    std::thread ta([&] { status_a = ca->prefill(tokens_, *got_a, nullptr); });
    std::thread tb([&] { status_b = cb->prefill(other, *got_b, nullptr); });
    ta.join();
    tb.join();
    BATON_ASSERT_OK(status_a);
    BATON_ASSERT_OK(status_b);
    expect_kv_close(*got_a, *want_a, 0, 150, kSameMath, absl::StrFormat("worker 0, round %d", round));
    expect_kv_close(*got_b, *want_b, 0, 150, kSameMath, absl::StrFormat("worker 1, round %d", round));
  }
  ca->begin_sequence();
  cb->begin_sequence();
  EXPECT_EQ(ca->shared().kv_pool->free_blocks(), all_blocks);
}

TEST(CudaFactory, SaysWhyWhenThereIsNoGpu) {
  // Runs everywhere: without a GPU the factory must fail with the driver's reason.
  auto probe = probe_devices();
  auto factory = make_cuda_prefill_backend_factory(CudaBackendOptions{});
  if (probe.ok()) {
    EXPECT_TRUE(factory.ok()) << factory.status();
  } else {
    ASSERT_FALSE(factory.ok());
    EXPECT_EQ(factory.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(factory.status().message().find("no CUDA device"), std::string::npos) << factory.status();
  }
}

}  // namespace
}  // namespace baton::cuda
