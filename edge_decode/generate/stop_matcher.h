// StopMatcher: stop strings of a Generate call. Generated text that could
// be the start of a stop string is held back until it is known not to be;
// a completed stop string ends generation and is never sent. Works on
// UTF-8 text from StreamingDecoder: a held-back suffix begins with a stop
// string's first byte, so every cut is at a character boundary.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace baton {

// Limits on a request's stop strings, the same over HTTP and gRPC: every
// generated token is matched against each of them.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;

// INVALID_ARGUMENT naming `field` ("stop") and the limit when `stops` has
// more than kMaxStopStrings strings or one longer than kMaxStopStringBytes.
absl::Status check_stop_strings(const std::vector<std::string>& stops, std::string_view field);

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds decoded text; returns what can be sent now. Sets *stopped when a
  // stop string completed (the returned text then ends right before it, and
  // the rest is dropped).
  std::string add(const std::string& text, bool* stopped);
  // The end of generation: what was held back is sent after all.
  std::string flush();

 private:
  std::vector<std::string> stops_;  // empty strings are ignored
  std::string pending_;             // text held back
};

}  // namespace baton
