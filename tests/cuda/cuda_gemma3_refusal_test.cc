// The CUDA backend implements llama / qwen2 only: a gemma3 model (post-norms,
// GeGLU, sliding-window layers) is refused with the way out named, before any
// device work, so it runs without a GPU too. It would fail if the backend
// uploaded the model and computed llama's block on it.
#include <gtest/gtest.h>

#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "cuda_test_util.h"

namespace baton::cuda {
namespace {

TEST(CudaBackendGemma3, RefusedWithTheCpuBackendNamed) {
  auto model = Model::Load(testing::synth_model("tiny-gemma3", 0, GgmlType::kF16));
  ASSERT_TRUE(model.ok()) << model.status();
  auto shared = CudaSharedModel::Create(**model, CudaBackendOptions{});
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.status().message().find("gemma3"), std::string::npos) << shared.status();
  EXPECT_NE(shared.status().message().find("--backend cpu"), std::string::npos) << shared.status();
}

}  // namespace
}  // namespace baton::cuda
