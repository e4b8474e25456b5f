#include "test_models.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "common/model/model_synth.h"
#include "common/util/check.h"

namespace baton::testing {

std::string make_temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("baton-" + tag + "-XXXXXX")).string();
  char* dir = mkdtemp(pattern.data());
  BATON_CHECK(dir != nullptr, "mkdtemp failed");
  return dir;
}

namespace {
// The models' directory, removed when the test binary exits.
struct ModelsDir {
  std::string path = make_temp_dir("models");
  ~ModelsDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

const std::string& models_dir() {
  static const ModelsDir dir;
  return dir.path;
}
}  // namespace

const std::string& synth_model_path(const std::string& shape, GgmlType type, uint64_t seed) {
  static std::mutex mu;
  static std::map<std::string, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = absl::StrFormat("%s-%s-%d", shape, ggml_type_name(type), seed);
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  const std::string path = models_dir() + "/" + key + ".gguf";
  const SynthShape* s = find_synth_shape(shape);
  BATON_CHECK(s != nullptr, "unknown test shape");
  absl::Status status = synthesize_model(*s, SynthOptions{type, seed, 2}, path);
  if (!status.ok()) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::string(status.message()).c_str());
    std::abort();
  }
  return paths.emplace(key, path).first->second;
}

std::string source_dir() {
  if (const char* env = std::getenv("BATON_SOURCE_DIR")) return env;
  return BATON_SOURCE_DIR;
}

}  // namespace baton::testing
