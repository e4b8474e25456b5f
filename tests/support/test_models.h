// Synthetic test models, written once per test binary run into a temp dir.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf/ggml_types.h"

namespace baton::testing {

// Path of a synthetic model of `shape` stored as `type` (seed 1), created on
// first use. Aborts the test binary if the model cannot be written.
const std::string& synth_model_path(const std::string& shape, GgmlType type, uint64_t seed = 1);

// A fresh temp directory for one test.
std::string make_temp_dir(const std::string& tag);

// Where the source tree is (for scripts and test data).
std::string source_dir();

// Logits of every position, [tokens.size(), n_vocab] row-major, from the
// independent NumPy forward pass (tests/tools/gguf_numpy_reference.py);
// empty, with *error set to its output, when it fails.
std::vector<float> numpy_reference_logits(const std::string& model_path, const std::vector<int32_t>& tokens,
                                          std::string* error);

}  // namespace baton::testing
