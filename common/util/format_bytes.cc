#include "common/util/format_bytes.h"

#include "absl/strings/str_format.h"

namespace baton {

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // Round first, so 1023.95 KiB prints as "1.0 MiB", never "1024.0 KiB".
  while (unit < 5 && value >= (unit < 2 ? 1023.95 : 1023.995)) {
    value /= 1024.0;
    ++unit;
  }
  // One literal format (clang checks absl::StrFormat strings at compile time); precision as an argument.
  return absl::StrFormat("%.*f %s", unit < 2 ? 1 : 2, value, kUnits[unit]);
}

std::string format_rate(double bytes_per_s) {
  if (!(bytes_per_s > 0)) return kNotMeasuredYet;
  return format_bytes(static_cast<uint64_t>(bytes_per_s)) + "/s";
}

}  // namespace baton
