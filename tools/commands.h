// Subcommands of the `baton` CLI. Each takes the arguments after its own name
// and returns the process exit code (0 ok, 1 failure, 2 usage error).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace baton {
class FlagSet;
}

namespace baton::cli {

using Args = std::vector<std::string>;

int model_command(const Args& args);     // baton model synth|quantize|info
int bench_command(const Args& args);     // baton bench decode|prefill
int generate_command(const Args& args);  // baton generate
int bench_kv_codec(const Args& args);    // baton bench kv-codec (cmd_bench_kv.cc)
int bench_kv_quality(const Args& args);  // baton bench kv-quality (cmd_bench_kv_quality.cc)


// Parses a subcommand's flags: on --help prints the usage and returns 0, on a
// bad flag prints one line and returns 2, else nullopt and the command runs.
std::optional<int> parse_flags(FlagSet& flags, const Args& args);

// Prints "baton: MESSAGE" to stderr and returns 1.
int fail(const std::string& message);

}  // namespace baton::cli
