// The Baton build version, reported by Health and --version.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace baton {

inline constexpr char kBatonVersion[] = "0.2.0";

// Where this binary came from. Defined in a .cc generated at build time
// (cmake/build_info.cmake, library baton_build_info): only programs that link
// that library may call build_info() or version_text().
struct BuildInfo {
  const char* git_commit;  // `git rev-parse --short HEAD`, "-dirty" when tracked files differ; "unknown" outside git
  const char* build_type;  // CMAKE_BUILD_TYPE: "Release", "Debug", ...
  bool cuda_compiled;      // the CUDA backend was built (nvcc found; option BATON_CUDA)
};
const BuildInfo& build_info();

// True when --version is among the arguments (before a "--"). Programs check it
// before parsing their flags, so --version needs none of the required ones.
bool version_requested(int argc, const char* const* argv);

// The --version block every program prints, one "name: value" line each:
//   baton-prefill 0.2.0
//   git commit:  bf13ebd-dirty
//   build type:  Release
//   SIMD level:  avx512
//   CUDA:        on (compiled in); GPU: no GPU found
// `gpu` is what the program's GPU probe found (cuda::describe_gpu); nullopt for
// a program without a CUDA backend (baton-edge), whose CUDA line says off.
std::string version_text(std::string_view program, const std::optional<std::string>& gpu);

}  // namespace baton
