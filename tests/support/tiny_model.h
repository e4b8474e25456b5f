// The synthetic "tiny" model (tests/support/test_models.h) loaded with what
// most KV tests need next to it: its fingerprint, KV geometry and RoPE, and
// an engine. One fixture instead of a copy of these lines per test file.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/kv_cache/kv_cache.h"
#include "common/gguf/ggml_types.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"

namespace baton::testing {

struct TinyModel {
  std::string path;
  std::unique_ptr<Model> model;
  ModelFingerprint fingerprint;
  KvGeometry geometry;  // kv_geometry_for(model->spec())
  KvRope rope;          // borrows model's frequencies
};

// Loads the tiny model stored as `type` (seed `seed`).
absl::StatusOr<TinyModel> load_tiny_model(GgmlType type = GgmlType::kF16, uint64_t seed = 1);

// The tiny model stored as `type`, loaded once per test binary and shared
// read-only; aborts the binary when it cannot be loaded.
const TinyModel& shared_tiny_model(GgmlType type = GgmlType::kF16);

// `n` deterministic token ids of `model`'s vocabulary; prompts of different
// seeds differ from their first token.
std::vector<int32_t> seeded_prompt(const TinyModel& model, int n, int seed);

// A test with its own tiny model (F16, seed 1) and an engine over it of
// `engine_threads` threads and 16-token micro-batches.
class TinyModelTest : public ::testing::Test {
 protected:
  explicit TinyModelTest(int engine_threads = 1) : engine_threads_(engine_threads) {}
  void SetUp() override;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  KvGeometry geometry_;
  KvRope rope_;
  ModelFingerprint fingerprint_;

 private:
  const int engine_threads_;
};

}  // namespace baton::testing
