// baton bench NAME: the table of benches, their help, and the dispatch.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_commands.h"
#include "common/util/flags.h"

namespace baton::cli {
namespace {

// Every bench, in the order `baton bench --help` lists them. The help text
// and the dispatch both come from this one table, so none can be missing.
struct Bench {
  const char* name;
  absl::Status (*run)(const Args& args);
  const char* what;
};
constexpr Bench kBenches[] = {
    {"decode", bench_decode, "decode tok/s and bytes/s read, beside the memory read bandwidth"},
    {"bandwidth", bench_bandwidth,
     "memory read bandwidth (bench decode's divisor) beside a plain STREAM-like read; fails if >10% below it"},
    {"prefill", bench_prefill, "local prefill tok/s (--local: the edge's batched Q4_0 prefill)"},
    {"prefill-service", bench_prefill_service,
     "baton-prefill on loopback: time to first KV block vs total, tok/s, prefix-cache speedup"},
    {"prefill-cuda", bench_prefill_cuda,
     "the CUDA prefill backend: tok/s, TFLOP/s, fraction of the H200's BF16 peak (needs a GPU)"},
    {"split", bench_split, "when the split pays: TTFT local vs cloud + link per WAN profile, crossover, plot"},
    {"load", bench_load,
     "N clients x M sessions x T turns against one edge: errors by status, TTFT p50/p99, memory high-water, "
     "nothing lost"},
    {"kv-codec", bench_kv_codec, "KV bytes per token, encode/decode MB/s and error per codec variant"},
    {"kv-quality", bench_kv_quality, "perplexity / KL / greedy agreement of each KV codec against F16 KV"},
    {"kv-window", bench_kv_window,
     "KV bytes per token on the wire and in the edge store: sliding-window layers vs full attention"},
    {"perplexity", bench_perplexity, "held-out perplexity of a model over a text or id file"},
    {"fidelity", bench_fidelity,
     "perplexity / KL vs the F16 model of the edge's Q4_0 alone and split with the cloud"},
};

std::string bench_usage() {
  std::string names, lines;
  for (const Bench& bench : kBenches) {
    names += (names.empty() ? "" : "|") + std::string(bench.name);
    lines += absl::StrFormat("  %-16s %s\n", bench.name, bench.what);
  }
  return absl::StrFormat("usage: baton bench %s ... [--json]\n%s"
                         "Run 'baton bench NAME --help' for the flags of one.\n",
                         names, lines);
}

}  // namespace

absl::Status bench_command(const Args& args) {
  const std::string usage = bench_usage();
  if (args.empty()) return exit_status(2, usage);
  if (args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage.c_str(), stdout);
    return absl::OkStatus();
  }
  const Args rest(args.begin() + 1, args.end());
  std::vector<std::string> names;
  for (const Bench& bench : kBenches) {
    if (args[0] == bench.name) return bench.run(rest);
    names.push_back(bench.name);
  }
  const std::optional<std::string> near = closest_name(args[0], names);
  return exit_status(2, absl::StrCat("baton bench: unknown bench '", args[0], "'",
                                     near ? "; did you mean '" + *near + "'?" : "", "\n", usage));
}

}  // namespace baton::cli
