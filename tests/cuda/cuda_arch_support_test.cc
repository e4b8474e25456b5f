// The CUDA prefill backend refuses the architectures its kernels do not
// implement, by name and with the way out, before touching a device: these
// tests need no GPU. Without the check a qwen3 / phi3 model would run on the
// GPU without its QK-norm / LongRoPE factor and stream wrong KV to the edge.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "cloud_prefill/cuda/cuda_arch_support.h"
#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "common/model/model.h"
#include "tests/cuda/cuda_test_util.h"

namespace baton::cuda {
namespace {

ModelSpec spec_of(const std::string& shape) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::synth_model(shape, 1, GgmlType::kF16));
  BATON_CHECK(model.ok(), "synthetic model must load");
  return (*model)->spec();
}

TEST(CudaArchSupportTest, LlamaAndQwen2AreAccepted) {
  EXPECT_TRUE(check_cuda_supports_model(spec_of("tiny")).ok());
  EXPECT_TRUE(check_cuda_supports_model(spec_of("tiny-llama3")).ok());
  EXPECT_TRUE(check_cuda_supports_model(spec_of("tiny-qwen2")).ok());
}

TEST(CudaArchSupportTest, OtherArchitecturesAreRefusedByNameWithTheCpuFlag) {
  for (const std::string shape : {"tiny-qwen3", "tiny-phi3"}) {
    const ModelSpec spec = spec_of(shape);
    const absl::Status status = check_cuda_supports_model(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << shape;
    EXPECT_NE(status.message().find("'" + spec.arch + "'"), std::string::npos) << status;
    EXPECT_NE(status.message().find("--backend cpu"), std::string::npos) << status;
  }
  ModelSpec gemma3 = spec_of("tiny");
  gemma3.arch = "gemma3";
  EXPECT_NE(check_cuda_supports_model(gemma3).message().find("'gemma3'"), std::string::npos);
}

TEST(CudaArchSupportTest, FeaturesTheKernelsLackAreRefusedEvenUnderAKnownName) {
  ModelSpec spec = spec_of("tiny-qwen2");
  spec.qk_norm = true;
  EXPECT_FALSE(check_cuda_supports_model(spec).ok());
  spec = spec_of("tiny");
  spec.rope.attn_factor = 1.2f;
  EXPECT_FALSE(check_cuda_supports_model(spec).ok());
  spec = spec_of("tiny");
  spec.layer_window = {0, 512};
  EXPECT_FALSE(check_cuda_supports_model(spec).ok());
}

// Construction refuses before any CUDA call, so the answer is the same with
// or without a GPU (without one, a device error would come back instead).
TEST(CudaArchSupportTest, BackendConstructionRefusesQwen3BeforeTouchingTheDevice) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(testing::synth_model("tiny-qwen3", 1, GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<CudaPrefillBackend>> backend = make_cuda_prefill_backend(**model, {});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  EXPECT_NE(backend.status().message().find("'qwen3'"), std::string::npos) << backend.status();
}

}  // namespace
}  // namespace baton::cuda
