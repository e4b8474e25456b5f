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
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_commands.h"
#include "common/util/flags.h"

#if BATON_HAVE_CUDA
#include <unistd.h>

#include "cloud_prefill/cuda/cuda_device.h"
#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#include "common/engine/f32_kv_cache.h"
#include "common/engine/sampler.h"
#include "common/model/model.h"
#include "common/model/model_synth.h"
#include "report.h"
#endif

namespace baton::cli {

#if BATON_HAVE_CUDA
std::optional<std::string> describe_gpu_for_version() { return cuda::describe_gpu(cuda::find_gpu()); }

namespace {

using Clock = std::chrono::steady_clock;

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

int64_t layer_matrix_parameters(const Model& model) {
  int64_t total = 0;
  for (int i = 0; i < model.spec().n_layer; ++i) {
    const LayerWeights& l = model.layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      total += w->rows * w->cols;
    }
  }
  return total;
}

}  // namespace

int bench_prefill_cuda(const Args& args) {
  std::string shape = "llama-3.2-1b", model_path, tokens_list = "2048,8192,32768", compute = "auto";
  std::string attention = "flash", weight_type = "f16";
  int64_t layers = 0, batch = 8192, depth = 3, block_tokens = 256;
  bool json = false;
  FlagSet flags("baton bench prefill-cuda",
                "[--shape NAME | --model FILE] [--tokens 2048,8192,32768] [--layers N] [--json]",
                "Prefill speed of the CUDA backend: one prompt of each token count after a warm-up "
                "run of the same size, K/V copied to a host F32 cache layer by layer. Prints tok/s, "
                "achieved TFLOP/s (2 * layer params * tokens + causal attention), its fraction of "
                "989 TFLOP/s (dense BF16 peak of H100/H200) and the time to the first KV block.");
  flags.add_string("shape", &shape, "synthetic model shape (" + synth_shape_names() + ")", "NAME");
  flags.add_string("model", &model_path, "GGUF model file instead of a synthetic shape", "FILE");
  flags.add_int64("layers", &layers, "layers of the synthetic model (0: the shape's)");
  flags.add_string("type", &weight_type, "stored type of the synthetic model's matrices (f16, bf16, q8_0)", "TYPE");
  flags.add_string("tokens", &tokens_list, "prompt sizes, comma-separated", "N,N,...");
  flags.add_string("compute", &compute, "compute type: auto (f16 for f16 weights, else bf16), f16, bf16", "TYPE");
  flags.add_string("attention", &attention, "attention kernel: flash (mma.sync), wmma or simple", "KIND");
  flags.add_int64("batch", &batch, "tokens per GEMM sub-batch");
  flags.add_int64("depth", &depth, "K/V staging slots (layers the GPU may run ahead of the host)");
  flags.add_int64("block-tokens", &block_tokens, "positions per device KV block");
  flags.add_bool("json", &json, "print one JSON object per prompt size instead of tables");
  if (auto code = bench_parse_flags(flags, args)) return *code;

  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(tokens_list, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return bench_fail(absl::StrFormat("--tokens: '%s' is not a positive count", std::string(part)));
    }
    sizes.push_back(n);
  }
  if (sizes.empty()) return bench_fail("--tokens lists no size");
  // Before synthesizing gigabytes of weights: is there a GPU at all?
  if (auto device = cuda::probe_devices(); !device.ok()) return bench_fail(std::string(device.status().message()));

  TempDir temp;
  std::string path = model_path;
  if (path.empty()) {
    const SynthShape* base = find_synth_shape(shape);
    if (base == nullptr) return bench_fail(absl::StrFormat("unknown shape '%s'; known: %s", shape, synth_shape_names()));
    SynthShape s = *base;
    if (layers > 0) s.n_layer = static_cast<int>(layers);
    GgmlType type;
    if (weight_type == "f16") {
      type = GgmlType::kF16;
    } else if (weight_type == "bf16") {
      type = GgmlType::kBF16;
    } else if (weight_type == "q8_0") {
      type = GgmlType::kQ8_0;
    } else {
      return bench_fail(absl::StrFormat("--type '%s' is not one of f16, bf16, q8_0", weight_type));
    }
    if (temp.path.empty()) return bench_fail("cannot create a temp dir for the synthetic model");
    path = temp.path + "/" + s.name + ".gguf";
    const auto start = Clock::now();
    if (absl::Status st = synthesize_model(s, SynthOptions{type, 1, 0}, path); !st.ok()) {
      return bench_fail(std::string(st.message()));
    }
    std::fprintf(stderr, "synthesized %s (%d layers, %s) in %.1f s\n", s.name.c_str(), s.n_layer,
                 weight_type.c_str(), std::chrono::duration<double>(Clock::now() - start).count());
  }
  auto model = Model::Load(path);
  if (!model.ok()) return bench_fail(std::string(model.status().message()));
  const ModelSpec& s = (*model)->spec();

  int64_t max_tokens = 0;
  for (int64_t n : sizes) max_tokens = std::max(max_tokens, n);
  cuda::CudaBackendOptions options;
  options.compute_type = compute;
  options.attention = attention;
  options.max_batch_tokens = static_cast<int>(batch);
  options.pipeline_depth = static_cast<int>(depth);
  options.kv_block_tokens = static_cast<int>(block_tokens);
  options.kv_pool_tokens = max_tokens + block_tokens;
  const auto upload_start = Clock::now();
  auto backend = cuda::make_cuda_prefill_backend(**model, options);
  if (!backend.ok()) return bench_fail(std::string(backend.status().message()));
  const double upload_s = std::chrono::duration<double>(Clock::now() - upload_start).count();

  const double layer_params = static_cast<double>(layer_matrix_parameters(**model));
  const KvGeometry geometry = kv_geometry_for(s);
  for (int64_t n : sizes) {
    Rng rng(1);
    std::vector<int32_t> tokens(n);
    for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(s.n_vocab));
    F32KvCache kv(geometry, n);
    // Warm-up of the same size: scratch, pinned buffers, cuBLAS heuristics.
    (*backend)->begin_sequence();
    if (absl::Status st = (*backend)->prefill(tokens, kv, nullptr); !st.ok()) return bench_fail(std::string(st.message()));
    kv.set_size(0);
    (*backend)->begin_sequence();

    Clock::time_point first_block{};
    auto layer_done = [&](int layer) {
      if (layer == 0) first_block = Clock::now();
      return absl::OkStatus();
    };
    const auto start = Clock::now();
    if (absl::Status st = (*backend)->prefill(tokens, kv, layer_done); !st.ok()) return bench_fail(std::string(st.message()));
    const auto end = Clock::now();
    const double seconds = std::chrono::duration<double>(end - start).count();
    const double first_s = std::chrono::duration<double>(first_block - start).count();
    const double matmul_flops = 2.0 * layer_params * static_cast<double>(n);
    const double pairs = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
    const double attention_flops = 4.0 * s.n_layer * s.n_head * s.head_dim * pairs;
    const double flops_per_s = (matmul_flops + attention_flops) / seconds;

    Report r(absl::StrFormat("prefill-cuda: %s (%d layers), %d tokens, %s", s.name, s.n_layer, n,
                             (*backend)->name()));
    r.add_text("shape", "model", s.name);
    r.add_int("layers", "layers", s.n_layer);
    r.add_int("tokens", "tokens", n);
    r.add_text("attention", "attention kernel", attention);
    r.add("prefill_tok_per_s", "prefill", n / seconds, "tok/s", 0);
    r.add("prefill_seconds", "time", seconds, "s", 4);
    r.add("tflop_per_s", "achieved", flops_per_s / 1e12, "TFLOP/s", 1);
    r.add("fraction_of_peak", "fraction of 989 TFLOP/s", flops_per_s / kPeakBf16Flops, "", 3);
    r.add("matmul_tflop", "GEMM work", matmul_flops / 1e12, "TFLOP", 2);
    r.add("attention_tflop", "attention work", attention_flops / 1e12, "TFLOP", 2);
    r.add("first_kv_block_ms", "time to first KV block", first_s * 1e3, "ms", 2);
    r.add("first_kv_block_fraction", "first KV block / total", first_s / seconds, "", 3);
    r.add("weights_upload_s", "weights upload (once)", upload_s, "s", 2);
    r.add_text("backend", "backend", (*backend)->name());
    r.print(json);
  }
  return 0;
}

#else  // !BATON_HAVE_CUDA

std::optional<std::string> describe_gpu_for_version() { return std::nullopt; }  // the CUDA line says: not compiled in

int bench_prefill_cuda(const Args& args) {
  return bench_fail("bench prefill-cuda: this baton was built without CUDA (configure where the CUDA toolkit is installed)");
}

#endif

}  // namespace baton::cli
