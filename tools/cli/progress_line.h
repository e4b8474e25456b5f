// ProgressLine: a one-line status on a terminal, redrawn in place ("\r" and
// erase-to-end-of-line) and cleared before other output goes to the same
// terminal. Off when the stream is not a terminal, so logs and pipes never see
// it. The text of a progress event is formatted here too.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/util/format_bytes.h"
#include "proto/baton.pb.h"

namespace baton::cli {

class ProgressLine {
 public:
  // Enabled when `out` is a terminal (isatty) and `allowed` is true.
  explicit ProgressLine(std::FILE* out = stderr, bool allowed = true);
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool enabled() const { return enabled_; }
  // Redraws the line with `text`; at most every 100 ms unless `force`.
  void update(const std::string& text, bool force = false);
  // Erases the line (if drawn); the next output starts at column 0.
  void clear();

 private:
  std::FILE* out_;
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// Byte counts and rates: baton::format_bytes / format_rate
// (common/util/format_bytes.h), the one formatter of every program.
// The text of a Generate / PullPack progress event: the phase, then for KV
// "layers 3/22  1.2 MiB of 4.0 MiB  12.3 MiB/s", for local prefill "tokens
// 300/800". `kv_rate_bytes_per_s` is the client's measured rate (0: omitted).
std::string format_progress(const v1::Progress& progress, double kv_rate_bytes_per_s);
// "cloud prefill", "receiving KV", ... for a Phase.
const char* phase_name(v1::Phase phase);

}  // namespace baton::cli
