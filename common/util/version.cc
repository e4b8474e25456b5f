#include "common/util/version.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/util/cpu_features.h"

namespace baton {

bool version_requested(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--version") == 0) return true;
  }
  return false;
}

namespace {

// The kernels' level, and the CPU's when BATON_SIMD lowered it.
std::string simd_line() {
  const SimdLevel active = active_simd_level();
  const SimdLevel best = best_simd_level();
  if (active == best) return simd_level_name(active);
  return absl::StrCat(simd_level_name(active), " (lowered by BATON_SIMD; this CPU runs ", simd_level_name(best), ")");
}

std::string cuda_line(std::string_view program, const std::optional<std::string>& gpu) {
  if (!build_info().cuda_compiled) return "off (not compiled in: no CUDA toolkit at build time)";
  if (!gpu.has_value()) return absl::StrCat("off (", std::string(program), " runs on the CPU only)");
  return absl::StrCat("on (compiled in); GPU: ", *gpu);
}

}  // namespace

std::string version_text(std::string_view program, const std::optional<std::string>& gpu) {
  const BuildInfo& info = build_info();
  return absl::StrCat(std::string(program), " ", kBatonVersion, "\n",        //
                      "git commit:  ", info.git_commit, "\n",   //
                      "build type:  ", info.build_type, "\n",   //
                      "SIMD level:  ", simd_line(), "\n",       //
                      "CUDA:        ", cuda_line(program, gpu), "\n");
}

}  // namespace baton
