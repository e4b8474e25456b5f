// Transitional: the benches' int exit codes from before commands returned
// absl::Status (bench_command turns them into a status). To go when every
// bench returns a status itself.
#pragma once

#include <optional>
#include <string>

#include "commands.h"

namespace baton::cli {

// On --help prints the usage and returns 0, on a bad flag prints one line
// and returns 2, else nullopt and the bench runs.
std::optional<int> bench_parse_flags(FlagSet& flags, const Args& args);

// Prints "baton: MESSAGE" to stderr and returns 1.
int bench_fail(const std::string& message);

}  // namespace baton::cli
