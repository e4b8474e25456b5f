#include "tests/support/test_models.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

std::vector<float> numpy_reference_logits(const std::string& model_path, const std::vector<int32_t>& tokens,
                                          std::string* error) {
  const std::string script = source_dir() + "/tests/tools/gguf_numpy_reference.py";
  const std::string out_path = make_temp_dir("numpy") + "/logits.bin";
  const std::string cmd = absl::StrFormat("/usr/bin/python3 %s %s --tokens %s --out %s 2>&1", script, model_path,
                                          absl::StrJoin(tokens, ","), out_path);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *error = "popen failed";
    return {};
  }
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) *error += buf;
  if (pclose(pipe) != 0) return {};
  std::ifstream in(out_path, std::ios::binary);
  std::vector<float> logits;
  float v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof(v))) logits.push_back(v);
  return logits;
}

}  // namespace baton::testing
