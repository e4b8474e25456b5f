#include "progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

namespace baton::cli {

ProgressLine::ProgressLine(std::FILE* out, bool allowed) : out_(out) {
  enabled_ = allowed && out != nullptr && isatty(fileno(out)) == 1;
}

void ProgressLine::update(const std::string& text, bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  // A line longer than the terminal wraps, and "\r" cannot erase the part
  // above: cut it to the width.
  std::string shown = text;
  winsize size{};
  if (ioctl(fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && shown.size() >= size.ws_col) {
    shown.resize(size.ws_col - 1);
  }
  std::fprintf(out_, "\r\033[K%s", shown.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!enabled_ || !drawn_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

const char* phase_name(v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_TOKENIZING: return "tokenizing";
    case v1::PHASE_PLANNING: return "planning";
    case v1::PHASE_CLOUD_PREFILL: return "cloud prefill";
    case v1::PHASE_RECEIVING_KV: return "receiving KV";
    case v1::PHASE_INGESTING: return "ingesting KV";
    case v1::PHASE_LOCAL_PREFILL: return "local prefill";
    case v1::PHASE_DECODING: return "decoding";
    default: return "working";
  }
}

std::string format_progress(const v1::Progress& progress, double kv_rate_bytes_per_s) {
  std::string text = absl::StrFormat("[%s]", phase_name(progress.phase()));
  if (progress.n_layer() > 0 && (progress.kv_layers_received() > 0 || progress.kv_bytes_received() > 0)) {
    text += absl::StrFormat(" layers %d/%d  %s", progress.kv_layers_received(), progress.n_layer(),
                            format_bytes(progress.kv_bytes_received()));
    if (progress.kv_bytes_expected() > 0) text += " of " + format_bytes(progress.kv_bytes_expected());
    if (kv_rate_bytes_per_s > 0) text += "  " + format_rate(kv_rate_bytes_per_s);
  }
  if (progress.tokens_total() > 0) {
    text += absl::StrFormat(" tokens %d/%d", progress.tokens_done(), progress.tokens_total());
  }
  text += absl::StrFormat("  %.1f s", progress.elapsed_ms() / 1e3);
  return text;
}

}  // namespace baton::cli
