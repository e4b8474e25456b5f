#include "common/util/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace baton {
namespace {

TEST(CpuFeatures, LevelsAreConsistentWithFeatureBits) {
  const CpuFeatures& f = cpu_features();
  const SimdLevel best = best_simd_level();
  if (best >= SimdLevel::kAvx2) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  }
  if (best == SimdLevel::kAvx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni);
  }
  // Feature implications a real CPU always satisfies.
  if (f.avx512bw || f.avx512vl || f.avx512dq || f.avx512vnni) {
    EXPECT_TRUE(f.avx512f);
  }
  EXPECT_LE(active_simd_level(), best);
  std::printf("best SIMD level: %s, active: %s, avx_vnni: %d\n", simd_level_name(best),
              simd_level_name(active_simd_level()), f.avx_vnni ? 1 : 0);
}

// The vendor bit against the kernel's own reading of CPUID (vendor_id in
// /proc/cpuinfo), where Linux provides it.
TEST(CpuFeatures, AmdBitMatchesTheVendorLinuxReports) {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) GTEST_SKIP() << "no /proc/cpuinfo here";
  char line[512];
  std::string vendor;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const std::string s(line);
    if (s.rfind("vendor_id", 0) == 0) {
      vendor = s.substr(s.find(':') + 2);
      while (!vendor.empty() && (vendor.back() == '\n' || vendor.back() == ' ')) vendor.pop_back();
      break;
    }
  }
  std::fclose(f);
  if (vendor.empty()) GTEST_SKIP() << "/proc/cpuinfo names no vendor_id";
  EXPECT_EQ(cpu_features().amd, vendor == "AuthenticAMD") << "vendor_id: " << vendor;
}

TEST(CpuFeatures, DetectionIsStable) {
  EXPECT_EQ(&cpu_features(), &cpu_features());
  EXPECT_EQ(best_simd_level(), best_simd_level());
}

TEST(CpuFeatures, RequestCanLowerButNeverRaiseTheLevel) {
  EXPECT_EQ(simd_level_for_request("scalar", SimdLevel::kAvx512), SimdLevel::kScalar);
  EXPECT_EQ(simd_level_for_request("avx2", SimdLevel::kAvx512), SimdLevel::kAvx2);
  EXPECT_EQ(simd_level_for_request("avx512", SimdLevel::kAvx512), SimdLevel::kAvx512);
  EXPECT_EQ(simd_level_for_request("avx512", SimdLevel::kAvx2), SimdLevel::kAvx2);
  EXPECT_EQ(simd_level_for_request("avx2", SimdLevel::kScalar), SimdLevel::kScalar);
}

TEST(CpuFeatures, MissingOrUnknownRequestKeepsBest) {
  EXPECT_EQ(simd_level_for_request(nullptr, SimdLevel::kAvx2), SimdLevel::kAvx2);
  EXPECT_EQ(simd_level_for_request("", SimdLevel::kAvx512), SimdLevel::kAvx512);
  EXPECT_EQ(simd_level_for_request("sse9", SimdLevel::kAvx512), SimdLevel::kAvx512);
}

TEST(CpuFeatures, LevelNames) {
  EXPECT_EQ(std::string(simd_level_name(SimdLevel::kScalar)), "scalar");
  EXPECT_EQ(std::string(simd_level_name(SimdLevel::kAvx2)), "avx2");
  EXPECT_EQ(std::string(simd_level_name(SimdLevel::kAvx512)), "avx512");
}

}  // namespace
}  // namespace baton
