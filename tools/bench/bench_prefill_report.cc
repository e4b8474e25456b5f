#include "absl/strings/str_format.h"
#include "bench_prefill.h"

namespace baton::cli {
namespace {

double peak_ops(const std::optional<PeakFigure>& figure) { return figure ? figure->ops_per_s : 0.0; }

// The figure of `kind` ("int8", "bf16", "f32") in `peak`.
const std::optional<PeakFigure>& figure_of(const CpuPeak& peak, const std::string& kind) {
  return kind == "int8" ? peak.int8 : kind == "bf16" ? peak.bf16 : peak.f32;
}

}  // namespace

BenchReport prefill_cell_report(const PrefillRun& run, const PrefillCell& cell) {
  const double seconds = cell.seconds;
  const double matmul_rate = cell.matmul_ops / seconds;
  const double all_rate = (cell.matmul_ops + cell.attention_flops) / seconds;
  const double peak = peak_ops(run.matmul_peak.figure);
  const std::string kind = run.matmul_peak.kind;
  const std::string instruction = run.matmul_peak.figure ? run.matmul_peak.figure->instruction : "none";
  BenchReport r(absl::StrFormat(
      "prefill (local): %s, %d tokens, batches of %d, %d threads, %s kernels, KV %s; %s weights against the %s "
      "peak (%s, all %d threads, measured in this run just before and just after this cell, the larger held)",
      run.model, cell.tokens, run.batch, run.threads, run.kernels, run.kv_store, run.matmul_peak.weights, kind,
      instruction, run.peak.threads));
  r.add_int("tokens", "tokens", cell.tokens);
  r.add("prefill_tok_per_s", "prefill", cell.tokens / seconds, "tok/s");
  r.add("prefill_seconds", "time", seconds, "s", 3);
  r.add("matmul_gop", absl::StrFormat("matmul work (%s ops: 2 x MACs)", kind), cell.matmul_ops / 1e9, "GOP", 3);
  r.add("attention_gflop", "attention work (QK^T + PV, windows respected)", cell.attention_flops / 1e9, "GFLOP", 3);
  r.add("matmul_gop_per_s", "matmul achieved", matmul_rate / 1e9, "GOP/s");
  r.add("attention_gflop_per_s", "attention achieved (over the total time)", cell.attention_flops / seconds / 1e9,
        "GFLOP/s");
  r.add("all_gop_per_s", "matmul + attention achieved", all_rate / 1e9, "GOP/s");
  r.add_text("attention_products", "attention products on", run.attention_products);
  r.add_text("peak_kind", "peak held against", kind);
  r.add_text("peak_weights", "deciding weight type", run.matmul_peak.weights);
  r.add_text("peak_instruction", "peak instruction", instruction);
  r.add_measured("peak_gop_per_s", "peak (the larger of before and after)", peak / 1e9, "GOP/s");
  r.add_measured("peak_before_gop_per_s", "peak measured before the cell", peak_ops(figure_of(run.peak_before, kind)) / 1e9,
                 "GOP/s");
  r.add_measured("peak_after_gop_per_s", "peak measured after the cell", peak_ops(figure_of(run.peak_after, kind)) / 1e9,
                 "GOP/s");
  r.add_measured("matmul_fraction_of_peak", "matmul fraction of peak", peak > 0 ? matmul_rate / peak : 0, "", 4);
  r.add_measured("all_fraction_of_peak", "matmul + attention fraction of peak", peak > 0 ? all_rate / peak : 0, "",
                 4);
  r.add_measured("int8_peak_gop_per_s", "int8 peak (u8 x s8 dot products)", peak_ops(run.peak.int8) / 1e9, "GOP/s");
  r.add_measured("bf16_peak_gflop_per_s", "bf16 peak (dot products into f32)", peak_ops(run.peak.bf16) / 1e9,
                 "GFLOP/s");
  r.add_measured("f32_peak_gflop_per_s", "f32 peak (fma)", peak_ops(run.peak.f32) / 1e9, "GFLOP/s");
  r.add_int("batch", "batch", run.batch);
  r.add_int("threads", "threads", run.threads);
  r.add_text("kv_store", "KV store", run.kv_store);
  return r;
}

}  // namespace baton::cli
