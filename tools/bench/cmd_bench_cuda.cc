// baton bench prefill-cuda: speed of the CUDA prefill backend on a synthetic
// model of a real shape (or a GGUF file): tok/s, achieved TFLOP/s and its
// fraction of the H100/H200 dense BF16 peak, and the time to the first KV
// block (the first layer_done, when layer 0's K/V of the whole prompt are in
// host memory) against the total.
//
// FLOPs counted: 2 * (layer matrix parameters) * tokens for the GEMMs, plus
// attention 4 * n_head * head_dim per causal (query, key) pair per layer
// (Q K^T and P V); the embedding gather and the output projection (not run by
// prefill) are not counted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "common/model/model_synth.h"
#include "common/util/check.h"

#if BATON_HAVE_CUDA
#include <unistd.h>

#include "bench_report.h"
#include "cloud_prefill/cuda/cuda_device.h"
#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "common/kv_cache/f32_kv_cache.h"
#endif

namespace baton::cli {
namespace {

// The flags are the same with and without CUDA, so --help (and the README's
// flag table) does not depend on how baton was built.
struct CudaBenchFlags {
  std::string shape = "llama-3.2-1b", model_path, tokens_list = "2048,8192,32768", compute = "auto";
  std::string attention = "pipelined", weight_type = "f16";
  int64_t layers = 0, batch = 8192, depth = 3, block_tokens = 256;
  bool json = false, profile = false;
  std::vector<int64_t> sizes;  // from tokens_list
};

// Parses and checks the flags; false after --help.
absl::StatusOr<bool> parse_cuda_flags(const Args& args, CudaBenchFlags& f) {
  FlagSet flags("baton bench prefill-cuda",
                "[--shape NAME | --model FILE] [--tokens 2048,8192,32768] [--layers N] [--json]",
                "Prefill speed of the CUDA backend: one prompt of each token count after a warm-up "
                "run of the same size, K/V copied to a host F32 cache layer by layer. Prints tok/s, "
                "achieved TFLOP/s (2 * layer params * tokens + causal attention), its fraction of "
                "989 TFLOP/s (dense BF16 peak of H100/H200) and the time to the first KV block.");
  flags.add_string("shape", &f.shape, "synthetic model shape (" + synth_shape_names() + ")", "NAME");
  flags.add_string("model", &f.model_path, "GGUF model file instead of a synthetic shape", "FILE");
  flags.add_int64("layers", &f.layers, "layers of the synthetic model (0: the shape's)");
  flags.add_string("type", &f.weight_type, "stored type of the synthetic model's matrices (f16, bf16, q8_0)", "TYPE");
  flags.add_string("tokens", &f.tokens_list, "prompt sizes, comma-separated", "N,N,...");
  flags.add_string("compute", &f.compute, "compute type: auto (f16 for f16 weights, else bf16), f16, bf16", "TYPE");
  flags.add_string("attention", &f.attention, "attention kernel: pipelined (mma.sync, K/V tiles double-buffered), flash (its first version), wmma or simple", "KIND");
  flags.add_int64("batch", &f.batch, "tokens per GEMM sub-batch");
  flags.add_int64("depth", &f.depth, "K/V staging slots (layers the GPU may run ahead of the host)");
  flags.add_int64("block-tokens", &f.block_tokens, "positions per device KV block");
  flags.add_bool("profile", &f.profile,
                 "time the GPU's part with CUDA events: the compute stream and the attention kernels alone");
  flags.add_bool("json", &f.json, "print one JSON object per prompt size instead of tables");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return false;
  for (absl::string_view part : absl::StrSplit(f.tokens_list, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrFormat("--tokens: '%s' is not a positive count", std::string(part)));
    }
    f.sizes.push_back(n);
  }
  if (f.sizes.empty()) return absl::InvalidArgumentError("--tokens lists no size");
  return true;
}

}  // namespace

#if BATON_HAVE_CUDA
std::optional<std::string> describe_gpu_for_version() { return cuda::describe_gpu(cuda::find_gpu()); }

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense BF16

// A temp dir removed on exit from the command.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "baton-bench-cuda-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

// The model file: --model, or the synthetic shape written into `temp`.
absl::StatusOr<std::string> model_file(const CudaBenchFlags& f, const TempDir& temp) {
  if (!f.model_path.empty()) return f.model_path;
  const SynthShape* base = find_synth_shape(f.shape);
  if (base == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown shape '%s'; known: %s", f.shape, synth_shape_names()));
  }
  SynthShape s = *base;
  if (f.layers > 0) s.n_layer = static_cast<int>(f.layers);
  GgmlType type;
  if (f.weight_type == "f16") {
    type = GgmlType::kF16;
  } else if (f.weight_type == "bf16") {
    type = GgmlType::kBF16;
  } else if (f.weight_type == "q8_0") {
    type = GgmlType::kQ8_0;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat("--type '%s' is not one of f16, bf16, q8_0", f.weight_type));
  }
  if (temp.path.empty()) return absl::InternalError("cannot create a temp dir for the synthetic model");
  const std::string path = temp.path + "/" + s.name + ".gguf";
  const auto start = Clock::now();
  BATON_RETURN_IF_ERROR(synthesize_model(s, SynthOptions{type, 1, 0}, path));
  std::fprintf(stderr, "synthesized %s (%d layers, %s) in %.1f s\n", s.name.c_str(), s.n_layer,
               f.weight_type.c_str(), seconds_between(start, Clock::now()));
  return path;
}

// One prompt of `n` tokens after a warm-up run of the same size.
absl::StatusOr<BenchReport> measure_size(const CudaBenchFlags& f, const Model& model,
                                         cuda::CudaPrefillBackend& backend, int64_t n, double upload_s) {
  const ModelSpec& s = model.spec();
  const std::vector<int32_t> tokens = synthetic_tokens(n, s.n_vocab, 1);
  F32KvCache kv(kv_geometry_for(s), n);
  // Warm-up of the same size: scratch, pinned buffers, cuBLAS heuristics.
  backend.begin_sequence();
  BATON_RETURN_IF_ERROR(backend.prefill(tokens, kv, nullptr));
  kv.set_size(0);
  backend.begin_sequence();

  Clock::time_point first_block{};
  auto layer_done = [&](int layer) {
    if (layer == 0) first_block = Clock::now();
    return absl::OkStatus();
  };
  const auto start = Clock::now();
  BATON_RETURN_IF_ERROR(backend.prefill(tokens, kv, layer_done));
  const double seconds = seconds_between(start, Clock::now());
  const double first_s = seconds_between(start, first_block);
  const double matmul_flops = 2.0 * static_cast<double>(layer_matrix_elements(model)) * static_cast<double>(n);
  const double pairs = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  const double attention_flops = 4.0 * s.n_layer * s.n_head * s.head_dim * pairs;
  const double flops_per_s = (matmul_flops + attention_flops) / seconds;

  BenchReport r(absl::StrFormat("prefill-cuda: %s (%d layers), %d tokens, %s", s.name, s.n_layer, n, backend.name()));
  r.add_text("shape", "model", s.name);
  r.add_int("layers", "layers", s.n_layer);
  r.add_int("tokens", "tokens", n);
  r.add_text("attention", "attention kernel", f.attention);
  r.add_int("depth", "K/V staging slots", f.depth);
  r.add("prefill_tok_per_s", "prefill", n / seconds, "tok/s", 0);
  r.add("prefill_seconds", "time", seconds, "s", 4);
  r.add("tflop_per_s", "achieved", flops_per_s / 1e12, "TFLOP/s", 1);
  r.add("fraction_of_peak", "fraction of 989 TFLOP/s", flops_per_s / kPeakBf16Flops, "", 3);
  r.add("matmul_tflop", "GEMM work", matmul_flops / 1e12, "TFLOP", 2);
  r.add("attention_tflop", "attention work", attention_flops / 1e12, "TFLOP", 2);
  r.add("first_kv_block_ms", "time to first KV block", first_s * 1e3, "ms", 2);
  r.add("first_kv_block_fraction", "first KV block / total", first_s / seconds, "", 3);
  r.add("weights_upload_s", "weights upload (once)", upload_s, "s", 2);
  const cuda::CudaPrefillTimings& t = backend.last_timings();
  r.add("host_wait_ms", "host: waiting for K/V copies", t.host_wait_ms, "ms", 2);
  r.add("host_store_ms", "host: K/V rows into the cache", t.host_store_ms, "ms", 2);
  if (f.profile) {
    r.add("gpu_ms", "GPU: compute stream (embedding to last layer)", t.gpu_ms, "ms", 2);
    r.add("gpu_tflop_per_s", "GPU: achieved over the compute stream's time",
          (matmul_flops + attention_flops) / (t.gpu_ms * 1e-3) / 1e12, "TFLOP/s", 1);
    r.add("attention_ms", "GPU: attention kernels", t.attention_ms, "ms", 2);
    r.add("attention_tflop_per_s", "GPU: attention kernels' rate", attention_flops / (t.attention_ms * 1e-3) / 1e12,
          "TFLOP/s", 1);
    r.add("other_gpu_tflop_per_s", "GPU: GEMMs and the rest, rate", matmul_flops / ((t.gpu_ms - t.attention_ms) * 1e-3) / 1e12,
          "TFLOP/s", 1);
  }
  r.add_text("backend", "backend", backend.name());
  return r;
}

}  // namespace

absl::Status bench_prefill_cuda(const Args& args) {
  CudaBenchFlags f;
  BATON_ASSIGN_OR_RETURN(const bool run, parse_cuda_flags(args, f));
  if (!run) return absl::OkStatus();
  // Before synthesizing gigabytes of weights: is there a GPU at all?
  BATON_RETURN_IF_ERROR(cuda::probe_devices().status());
  TempDir temp;
  BATON_ASSIGN_OR_RETURN(const std::string path, model_file(f, temp));
  BATON_ASSIGN_OR_RETURN(const std::unique_ptr<Model> model, Model::Load(path));
  cuda::CudaBackendOptions options;
  options.compute_type = f.compute;
  options.attention = f.attention;
  options.max_batch_tokens = static_cast<int>(f.batch);
  options.pipeline_depth = static_cast<int>(f.depth);
  options.kv_block_tokens = static_cast<int>(f.block_tokens);
  options.profile = f.profile;
  options.kv_pool_tokens = *std::max_element(f.sizes.begin(), f.sizes.end()) + f.block_tokens;
  const auto upload_start = Clock::now();
  BATON_ASSIGN_OR_RETURN(const auto backend, cuda::make_cuda_prefill_backend(*model, options));
  const double upload_s = seconds_between(upload_start, Clock::now());
  for (int64_t n : f.sizes) {
    BATON_ASSIGN_OR_RETURN(const BenchReport report, measure_size(f, *model, *backend, n, upload_s));
    report.print(f.json);
  }
  return absl::OkStatus();
}

#else  // !BATON_HAVE_CUDA

std::optional<std::string> describe_gpu_for_version() { return std::nullopt; }  // the CUDA line says: not compiled in

absl::Status bench_prefill_cuda(const Args& args) {
  CudaBenchFlags f;
  BATON_ASSIGN_OR_RETURN(const bool run, parse_cuda_flags(args, f));
  if (!run) return absl::OkStatus();  // --help
  return absl::FailedPreconditionError(
      "bench prefill-cuda: this baton was built without CUDA (configure where the CUDA toolkit is installed)");
}

#endif

}  // namespace baton::cli
