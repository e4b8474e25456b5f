// CUDA toolchain check: runs only where a GPU is present, skips with the
// driver's reason elsewhere.
#include <gtest/gtest.h>

#include <vector>

#include "cloud_prefill/cuda/cuda_device.h"

namespace baton::cuda {
namespace {

TEST(CudaDevice, SaxpyMatchesHost) {
  auto info = probe_devices();
  if (!info.ok()) GTEST_SKIP() << "no GPU here: " << info.status().message();
  const int n = 1000;
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * i;
    y[i] = 1.0f - i;
    expected[i] = 3.0f * x[i] + y[i];
  }
  ASSERT_TRUE(saxpy_on_device(3.0f, x.data(), y.data(), n).ok());
  for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], expected[i]) << "at " << i;
}

}  // namespace
}  // namespace baton::cuda
