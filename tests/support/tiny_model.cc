#include "tests/support/tiny_model.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "tests/support/test_models.h"

namespace baton::testing {

absl::StatusOr<TinyModel> load_tiny_model(GgmlType type, uint64_t seed) {
  TinyModel tiny;
  tiny.path = synth_model_path("tiny", type, seed);
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(tiny.path);
  if (!model.ok()) return model.status();
  tiny.model = std::move(*model);
  absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(*tiny.model);
  if (!fingerprint.ok()) return fingerprint.status();
  tiny.fingerprint = *std::move(fingerprint);
  tiny.geometry = kv_geometry_for(tiny.model->spec());
  tiny.rope = kv_rope_of(*tiny.model);
  return tiny;
}

const TinyModel& shared_tiny_model(GgmlType type) {
  static std::mutex mu;
  static std::map<GgmlType, TinyModel>* models = new std::map<GgmlType, TinyModel>;  // never freed: used at exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = models->find(type);
  if (it != models->end()) return it->second;
  absl::StatusOr<TinyModel> tiny = load_tiny_model(type);
  if (!tiny.ok()) {
    std::fprintf(stderr, "cannot load the tiny model: %s\n", std::string(tiny.status().message()).c_str());
    std::abort();
  }
  return models->emplace(type, *std::move(tiny)).first->second;
}

std::vector<int32_t> seeded_prompt(const TinyModel& model, int n, int seed) {
  std::vector<int32_t> tokens;
  const int n_vocab = model.model->spec().n_vocab;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 7 + seed * 131 + 3) % n_vocab);
  return tokens;
}

void TinyModelTest::SetUp() {
  absl::StatusOr<TinyModel> tiny = load_tiny_model();
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  model_ = std::move(tiny->model);
  engine_ = std::make_unique<Engine>(*model_, EngineOptions{engine_threads_, 16});
  geometry_ = engine_->kv_geometry();
  rope_ = kv_rope_of(*model_);
  fingerprint_ = std::move(tiny->fingerprint);
}

}  // namespace baton::testing
