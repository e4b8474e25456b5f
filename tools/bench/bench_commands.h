// `baton bench ...`: every benchmark, behind the one entry point
// bench_command (cmd_bench.cc). Only this library may start in-process
// servers or use the CUDA backend.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "bench_legacy.h"
#include "commands.h"

namespace baton::cli {

absl::Status bench_command(const Args& args);  // baton bench NAME ...

// The GPU line of `baton --version`: the CUDA device, or nullopt when this
// baton was built without CUDA.
std::optional<std::string> describe_gpu_for_version();

int bench_kv_codec(const Args& args);    // baton bench kv-codec (cmd_bench_kv.cc)
int bench_kv_quality(const Args& args);  // baton bench kv-quality (cmd_bench_kv_quality.cc)
int bench_kv_window(const Args& args);   // baton bench kv-window (cmd_bench_kv_window.cc)
int bench_prefill_service(const Args& args);  // baton bench prefill-service (cmd_bench_prefill_service.cc)
int bench_prefill_cuda(const Args& args);  // baton bench prefill-cuda (cmd_bench_cuda.cc)
int bench_fidelity(const Args& args);    // baton bench fidelity (cmd_bench_fidelity.cc)
int bench_split(const Args& args);       // baton bench split (cmd_bench_split.cc)
int bench_load(const Args& args);        // baton bench load (cmd_bench_load.cc)

}  // namespace baton::cli
