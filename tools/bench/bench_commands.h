// `baton bench ...`: every benchmark, behind the one entry point
// bench_command (cmd_bench.cc). Only this library may start in-process
// servers or use the CUDA backend. Each bench returns a status that
// baton_main turns into output and the exit code (command_status.h).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "commands.h"

namespace baton::cli {

absl::Status bench_command(const Args& args);  // baton bench NAME ...

// The GPU line of `baton --version`: the CUDA device, or nullopt when this
// baton was built without CUDA.
std::optional<std::string> describe_gpu_for_version();

absl::Status bench_decode(const Args& args);           // baton bench decode (cmd_bench_decode.cc)
absl::Status bench_bandwidth(const Args& args);        // baton bench bandwidth (cmd_bench_bandwidth.cc)
absl::Status bench_prefill(const Args& args);          // baton bench prefill (cmd_bench_prefill.cc)
absl::Status bench_perplexity(const Args& args);       // baton bench perplexity (cmd_bench_prefill.cc)
absl::Status bench_kv_codec(const Args& args);         // baton bench kv-codec (cmd_bench_kv.cc)
absl::Status bench_kv_quality(const Args& args);       // baton bench kv-quality (cmd_bench_kv_quality.cc)
absl::Status bench_kv_window(const Args& args);        // baton bench kv-window (cmd_bench_kv_window.cc)
absl::Status bench_prefill_service(const Args& args);  // baton bench prefill-service (cmd_bench_prefill_service.cc)
absl::Status bench_prefill_cuda(const Args& args);     // baton bench prefill-cuda (cmd_bench_cuda.cc)
absl::Status bench_fidelity(const Args& args);         // baton bench fidelity (cmd_bench_fidelity.cc)
absl::Status bench_split(const Args& args);            // baton bench split (cmd_bench_split.cc)
absl::Status bench_load(const Args& args);             // baton bench load (cmd_bench_load.cc)

}  // namespace baton::cli
