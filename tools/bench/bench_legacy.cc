#include "bench_legacy.h"

#include <cstdio>

#include "common/util/flags.h"

namespace baton::cli {

std::optional<int> bench_parse_flags(FlagSet& flags, const Args& args) {
  absl::Status status = flags.parse(args);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n(see --help)\n", std::string(status.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.usage().c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

int bench_fail(const std::string& message) {
  std::fprintf(stderr, "baton: %s\n", message.c_str());
  return 1;
}

}  // namespace baton::cli
