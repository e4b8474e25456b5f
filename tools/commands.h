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

int model_command(const Args& args);     // baton model synth|quantize|info|verify
int model_verify(const Args& args);      // baton model verify (cmd_model_verify.cc)
int bench_command(const Args& args);     // baton bench decode|prefill
int generate_command(const Args& args);  // baton generate
int bench_kv_codec(const Args& args);    // baton bench kv-codec (cmd_bench_kv.cc)
int bench_kv_quality(const Args& args);  // baton bench kv-quality (cmd_bench_kv_quality.cc)
int bench_kv_window(const Args& args);   // baton bench kv-window (cmd_bench_kv_window.cc)
int bench_prefill_service(const Args& args);  // baton bench prefill-service (cmd_bench_prefill_service.cc)
int bench_prefill_cuda(const Args& args);  // baton bench prefill-cuda (cmd_bench_cuda.cc)
int bench_fidelity(const Args& args);    // baton bench fidelity (cmd_bench_fidelity.cc)
int bench_split(const Args& args);       // baton bench split (cmd_bench_split.cc)
int bench_load(const Args& args);        // baton bench load (cmd_bench_load.cc)
int generate_on_edge(const Args& args);  // baton generate --edge ADDR (cmd_generate_edge.cc)
int chat_command(const Args& args);      // baton chat (cmd_chat.cc)
int health_command(const Args& args);    // baton health --edge ADDR | --cloud ADDR
int sessions_command(const Args& args);  // baton sessions ls|rm
int pack_command(const Args& args);      // baton pack build|push|pull|ls|info
int plan_command(const Args& args);      // baton plan --model FILE --memory SIZE


// Parses a subcommand's flags: on --help prints the usage and returns 0, on a
// bad flag prints one line and returns 2, else nullopt and the command runs.
std::optional<int> parse_flags(FlagSet& flags, const Args& args);

// Prints "baton: MESSAGE" to stderr and returns 1.
int fail(const std::string& message);

}  // namespace baton::cli
