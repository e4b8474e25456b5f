// The service end to end on the CUDA backend: two baton-prefill services on
// 127.0.0.1 (real PrefillServer, real gRPC channel), one on the CPU backend
// and one on the CUDA backend, get the same prompt; both streams must verify
// (header, checksums, trailer), describe the same tokens, and decode to the
// same KV within the stated tolerance. Skips without a GPU.
//
// Tolerances (relative RMS / largest error over largest |ref|), per layer, K
// and V, of the CUDA stream decoded against the CPU stream decoded:
//   f16 codec:  5e-3 / 3e-2  (F16 compute against the CPU's F32, as in
//               cuda_prefill_backend_test; the f16 wire adds <= 2^-11)
//   int8 codec: 3e-2 / 1e-1  (the compute difference plus one int8 step of
//               each stream: a step is 1/127 of a group's largest |value|)
// A wrong layer, position, head or codec gives errors of order 1.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model_fingerprint.h"
#include "cuda_test_util.h"
#include "tests/support/edge_test_env.h"

namespace baton::cuda {
namespace {

using testing::ErrorStats;
using testing::Tolerance;

struct StreamCase {
  v1::KvCodec codec;
  Tolerance tolerance;
};

class CudaServiceStream : public ::testing::TestWithParam<StreamCase> {};
INSTANTIATE_TEST_SUITE_P(Codecs, CudaServiceStream,
                         ::testing::Values(StreamCase{v1::KV_CODEC_F16, {5e-3, 3e-2}},
                                           StreamCase{v1::KV_CODEC_INT8, {3e-2, 1e-1}}),
                         [](const auto& param_info) { return param_info.param.codec == v1::KV_CODEC_F16 ? "f16" : "int8"; });

struct Received {
  std::vector<v1::KvStreamMessage> messages;
  std::unique_ptr<F32KvCache> kv;
};

// One Prefill call; the stream read into a host cache through the edge's
// reader (read_kv_segment), which checks the header, every checksum and the
// trailer.
Received call_and_read(edge_test::Cloud& cloud, const Model& model, const std::vector<int32_t>& tokens,
                       v1::KvCodec codec, int64_t capacity) {
  Received r;
  v1::PrefillRequest request;
  for (int32_t t : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(t));
  request.mutable_codec()->set_codec(codec);
  auto fingerprint = model_fingerprint(model);
  EXPECT_TRUE(fingerprint.ok());
  if (!fingerprint.ok()) return r;
  *request.mutable_expected_model() = model_fingerprint_to_proto(*fingerprint);
  grpc::ClientContext context;
  edge_test::live_call(context, 180);
  auto reader = cloud.stub->Prefill(&context, request);
  v1::KvStreamMessage message;
  while (reader->Read(&message)) r.messages.push_back(message);
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  if (!status.ok()) return r;

  const ModelSpec& s = model.spec();
  r.kv = std::make_unique<F32KvCache>(KvGeometry{s.n_layer, s.n_head, s.n_head_kv, s.head_dim, {}}, capacity);
  KvStreamExpectation expected;
  expected.model = *fingerprint;
  expected.first_position = 0;
  expected.token_ids = tokens;
  const KvRope rope = kv_rope_of(model);
  auto load = read_kv_segment(r.messages, expected, &rope, *r.kv);
  EXPECT_TRUE(load.ok()) << load.status();
  if (!load.ok()) r.kv.reset();
  return r;
}

TEST_P(CudaServiceStream, TheCudaServicesStreamDecodesToTheCpuServicesKv) {
  BATON_REQUIRE_GPU();
  const StreamCase c = GetParam();
  // The 1B shape's real widths (32 query heads, 8 KV heads, head_dim 64) with
  // 2 layers; 600 tokens in chunks of 256 so the stream spans three chunks.
  const std::string& path = testing::synth_model("llama-3.2-1b", 2, GgmlType::kF16);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int64_t kTokens = 600;
  std::mt19937 rng(33);
  std::vector<int32_t> tokens(kTokens);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>((*model)->spec().n_vocab));

  PrefillServiceOptions options;
  options.threads = 4;
  options.max_running = 1;
  options.chunk_tokens = 256;
  options.max_context_tokens = 1024;
  auto cpu_cloud = edge_test::start_cloud_with(path, options);
  ASSERT_NE(cpu_cloud->server, nullptr);

  CudaBackendOptions cuda_options;
  cuda_options.kv_pool_tokens = 2048;
  auto factory = make_cuda_prefill_backend_factory(cuda_options);
  ASSERT_TRUE(factory.ok()) << factory.status();
  options.backend_factory = std::move(*factory);
  auto gpu_cloud = edge_test::start_cloud_with(path, options);
  ASSERT_NE(gpu_cloud->server, nullptr);

  const Received cpu = call_and_read(*cpu_cloud, **model, tokens, c.codec, 1024);
  const Received gpu = call_and_read(*gpu_cloud, **model, tokens, c.codec, 1024);
  ASSERT_NE(cpu.kv, nullptr);
  ASSERT_NE(gpu.kv, nullptr);
  ASSERT_FALSE(gpu.messages.empty());
  ASSERT_TRUE(gpu.messages.back().has_trailer());
  const v1::ProducerStats& producer = gpu.messages.back().trailer().producer();
  EXPECT_EQ(producer.backend().rfind("cuda", 0), 0u) << "the GPU service ran on '" << producer.backend() << "'";
  EXPECT_EQ(cpu.messages.back().trailer().producer().backend().rfind("cpu", 0), 0u);
  EXPECT_EQ(producer.computed_tokens(), static_cast<uint64_t>(kTokens));
  EXPECT_EQ(gpu.kv->size(), kTokens);
  EXPECT_EQ(cpu.kv->size(), kTokens);
  ASSERT_TRUE(gpu.messages.front().has_header());
  EXPECT_EQ(gpu.messages.front().header().codec().codec(), c.codec);

  const int64_t kv_dim = cpu.kv->geometry().kv_dim();
  for (int layer = 0; layer < (*model)->spec().n_layer; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      ErrorStats e;
      for (int64_t t = 0; t < kTokens; ++t) {
        const float* g = kind == 0 ? gpu.kv->k_row(layer, t) : gpu.kv->v_row(layer, t);
        const float* w = kind == 0 ? cpu.kv->k_row(layer, t) : cpu.kv->v_row(layer, t);
        for (int64_t i = 0; i < kv_dim; ++i) e.add(g[i], w[i]);
      }
      BATON_EXPECT_CLOSE(e, c.tolerance, absl::StrFormat("layer %d %s", layer, kind == 0 ? "K" : "V"));
    }
  }
}

}  // namespace
}  // namespace baton::cuda
