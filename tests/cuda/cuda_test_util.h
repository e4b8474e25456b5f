// Shared pieces of the CUDA tests: the skip-without-GPU guard, synthetic
// models (shapes of model_synth, optionally with fewer layers), device
// buffers from host vectors, 16-bit conversions and error statistics.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cloud_prefill/cuda/cuda_check.h"
#include "cloud_prefill/cuda/cuda_device.h"
#include "cloud_prefill/cuda/cuda_dtype.h"
#include "cloud_prefill/cuda/device_memory.h"
#include "common/model/model_synth.h"
#include "common/util/check.h"
#include "common/util/fp16.h"

// Skips the test (with the driver's reason) where no CUDA device is usable.
#define BATON_REQUIRE_GPU()                                                                  \
  do {                                                                                       \
    auto baton_probe_ = ::baton::cuda::probe_devices();                                      \
    if (!baton_probe_.ok()) GTEST_SKIP() << "no GPU here: " << baton_probe_.status().message(); \
  } while (0)

#define BATON_ASSERT_OK(expr)                                  \
  do {                                                         \
    const ::absl::Status baton_st_ = (expr);                   \
    ASSERT_TRUE(baton_st_.ok()) << #expr << ": " << baton_st_; \
  } while (0)

namespace baton::cuda::testing {

// A synthetic model of `shape` with n_layer layers (0: the shape's), matrices
// stored as `type`, written once per binary run into a temp dir removed at exit.
inline const std::string& synth_model(const std::string& shape, int n_layer, GgmlType type, uint64_t seed = 1) {
  struct Dir {
    std::string path;
    Dir() {
      std::string pattern = (std::filesystem::temp_directory_path() / "baton-cuda-test-XXXXXX").string();
      BATON_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
      path = pattern;
    }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static Dir dir;
  static std::mutex mu;
  static std::map<std::string, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = absl::StrFormat("%s-L%d-%s-%d", shape, n_layer, std::string(ggml_type_name(type)), seed);
  if (auto it = paths.find(key); it != paths.end()) return it->second;
  const SynthShape* base = find_synth_shape(shape);
  BATON_CHECK(base != nullptr, "unknown test shape");
  SynthShape s = *base;
  if (n_layer > 0) s.n_layer = n_layer;
  const std::string path = dir.path + "/" + key + ".gguf";
  const absl::Status status = synthesize_model(s, SynthOptions{type, seed, 0}, path);
  BATON_CHECK(status.ok(), "cannot write the synthetic test model");
  return paths.emplace(key, path).first->second;
}

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rounds through a 16-bit type (what the device holds).
inline float round_to(CudaDType t, float x) {
  if (t == CudaDType::kF16) return fp16_to_fp32(fp32_to_fp16(x));
  if (t == CudaDType::kBF16) return bf16_to_fp32(fp32_to_bf16(x));
  return x;
}
inline std::vector<uint16_t> to_16bit(CudaDType t, const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = t == CudaDType::kF16 ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
  return out;
}
inline std::vector<float> from_16bit(CudaDType t, const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = t == CudaDType::kF16 ? fp16_to_fp32(x[i]) : bf16_to_fp32(x[i]);
  return out;
}

// Device copy of a host vector.
template <typename T>
DeviceMemory to_device(const std::vector<T>& host) {
  DeviceMemory d;
  BATON_CHECK(d.reserve(std::max<size_t>(1, host.size() * sizeof(T))).ok(), "cudaMalloc failed");
  BATON_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}
template <typename T>
std::vector<T> to_host(const DeviceMemory& d, size_t n) {
  std::vector<T> host(n);
  BATON_CHECK(cudaDeviceSynchronize() == cudaSuccess, "a kernel failed");
  BATON_CHECK(cudaMemcpy(host.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}
// A device output of n elements of `t`, read back as f32.
inline std::vector<float> to_host_as_f32(CudaDType t, const DeviceMemory& d, size_t n) {
  if (t == CudaDType::kF32) return to_host<float>(d, n);
  return from_16bit(t, to_host<uint16_t>(d, n));
}

struct ErrorStats {
  double max_abs_err = 0, max_abs_ref = 0, sum_sq_err = 0, sum_sq_ref = 0;
  int64_t n = 0;
  int64_t worst_index = -1;
  void add(float got, float want) {
    const double err = std::fabs(static_cast<double>(got) - want);
    if (!(err <= max_abs_err)) {  // also catches NaN
      max_abs_err = std::isnan(err) ? INFINITY : err;
      worst_index = n;
    }
    max_abs_ref = std::max(max_abs_ref, std::fabs(static_cast<double>(want)));
    sum_sq_err += err * err;
    sum_sq_ref += static_cast<double>(want) * want;
    ++n;
  }
  // RMS of the error over the RMS of the reference.
  double rel_rms() const { return sum_sq_ref > 0 ? std::sqrt(sum_sq_err / sum_sq_ref) : std::sqrt(sum_sq_err); }
  // Largest error over the largest reference magnitude.
  double rel_max() const { return max_abs_ref > 0 ? max_abs_err / max_abs_ref : max_abs_err; }
  std::string summary() const {
    return absl::StrFormat("rel_rms %.3g, rel_max %.3g (max err %.4g at %d, max |ref| %.4g, %d values)", rel_rms(),
                           rel_max(), max_abs_err, worst_index, max_abs_ref, n);
  }
};

inline ErrorStats compare(const float* got, const float* want, size_t n) {
  ErrorStats e;
  for (size_t i = 0; i < n; ++i) e.add(got[i], want[i]);
  return e;
}
inline ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  return compare(got.data(), want.data(), std::min(got.size(), want.size()));
}

// Stated tolerances (relative RMS, relative max) by what was rounded.
struct Tolerance {
  double rel_rms;
  double rel_max;
};
#define BATON_EXPECT_CLOSE(stats, tol, what)                                              \
  do {                                                                                    \
    const auto& baton_s_ = (stats);                                                       \
    EXPECT_LE(baton_s_.rel_rms(), (tol).rel_rms) << (what) << ": " << baton_s_.summary(); \
    EXPECT_LE(baton_s_.rel_max(), (tol).rel_max) << (what) << ": " << baton_s_.summary(); \
  } while (0)

}  // namespace baton::cuda::testing
