#include "common/model/layer_window.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace baton {

bool has_sliding_window(const std::vector<int32_t>& layer_window) {
  for (int32_t w : layer_window) {
    if (w != 0) return true;
  }
  return false;
}

std::string layer_window_text(const std::vector<int32_t>& layer_window) {
  std::string out;
  for (size_t i = 0; i < layer_window.size();) {
    size_t run = 1;
    while (i + run < layer_window.size() && layer_window[i + run] == layer_window[i]) ++run;
    if (!out.empty()) out += ",";
    out += run == 1 ? absl::StrFormat("%d", layer_window[i]) : absl::StrFormat("%dx%d", layer_window[i], run);
    i += run;
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> parse_layer_window_text(const std::string& text, int n_layer) {
  std::vector<int32_t> out;
  if (text.empty()) {
    if (n_layer == 0) return out;
    return absl::InvalidArgumentError(absl::StrFormat("layer_window is empty; expected %d layers", n_layer));
  }
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(item, 'x');
    int32_t window = -1;
    int64_t run = 1;
    if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &window) || window < 0 ||
        (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &run) || run < 1))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer_window item '%s' is not WINDOW or WINDOWxCOUNT (window >= 0, count >= 1)", item));
    }
    if (run > n_layer - static_cast<int64_t>(out.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer_window '%s' lists more than the %d layers of the model", text, n_layer));
    }
    out.insert(out.end(), static_cast<size_t>(run), window);
  }
  if (static_cast<int64_t>(out.size()) != n_layer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer_window '%s' lists %d layers; the model has %d", text, out.size(), n_layer));
  }
  return out;
}

}  // namespace baton
