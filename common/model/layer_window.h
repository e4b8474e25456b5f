// Sliding-window attention per layer (ModelSpec::layer_window,
// KvGeometry::layer_window): the readable text form that the model
// fingerprint carries, and the one rule every KV holder shares: which
// positions of a windowed layer a later query can still see.
//
// Semantics (llama.cpp's standard SWA): window W > 0 means a query at
// position p sees keys at positions (p - W, p]; 0 means full attention.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

// True when some layer has a window (an empty list or all zeros: none).
bool has_sliding_window(const std::vector<int32_t>& layer_window);

// Run-length text of a per-layer window list, layer order: "512x5,0,512x5,0"
// (five layers of window 512, one full layer, ...). Empty list: "".
std::string layer_window_text(const std::vector<int32_t>& layer_window);
// The inverse. INVALID_ARGUMENT for malformed text, a negative window, or a
// layer count other than n_layer (the count is capped before allocation).
absl::StatusOr<std::vector<int32_t>> parse_layer_window_text(const std::string& text, int n_layer);

// The first position a layer of window `window` must hold once positions
// [0, end) are stored and the next query runs at position `end`: keys
// (end - window, end], so end - window + 1 (never below 0); 0 for a full
// layer. Positions below it are never read again.
inline int64_t window_first_kept_position(int32_t window, int64_t end) {
  if (window <= 0) return 0;
  const int64_t first = end - window + 1;
  return first > 0 ? first : 0;
}

}  // namespace baton
