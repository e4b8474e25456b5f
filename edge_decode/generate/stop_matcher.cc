#include "edge_decode/generate/stop_matcher.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace baton {

absl::Status check_stop_strings(const std::vector<std::string>& stops, std::string_view field) {
  if (stops.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' has %d strings; at most %d", field, stops.size(), kMaxStopStrings));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrFormat("'%s[%d]' has %d bytes; at most %d", field, i,
                                                        stops[i].size(), kMaxStopStringBytes));
    }
  }
  return absl::OkStatus();
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::add(const std::string& text, bool* stopped) {
  pending_ += text;
  *stopped = false;
  size_t first_stop = std::string::npos;
  for (const std::string& stop : stops_) first_stop = std::min(first_stop, pending_.find(stop));
  if (first_stop != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, first_stop);
    pending_.clear();
    return out;
  }
  // The longest suffix of pending_ that begins some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace baton
