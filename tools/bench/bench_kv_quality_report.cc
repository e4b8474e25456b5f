#include "absl/strings/str_format.h"
#include "bench_kv_quality.h"
#include "report.h"

namespace baton::cli {

Json kv_quality_json(const KvQualityRun& run) {
  Json variants = Json::array();
  for (const KvQualityRow& r : run.rows) {
    if (!r.error.empty()) {
      variants.push_back({{"codec", r.codec}, {"error", r.error}});
      continue;
    }
    variants.push_back({{"codec", r.codec},
                        {"store_codec", r.store_codec},
                        {"wire_bytes_per_token", fixed(r.wire_bpt, 1)},
                        {"raw_bytes_per_token", fixed(r.raw_bpt, 1)},
                        {"wire_ratio_to_f16", fixed(r.ratio, 4)},
                        {"store_bytes_per_token", whole(r.store_bpt)},
                        {"perplexity", significant(r.ppl)},
                        {"perplexity_change_pct", fixed(r.ppl_change_pct, 4)},
                        {"mean_kl", significant(r.mean_kl)},
                        {"greedy_agreement", fixed(r.agreement, 4)},
                        {"mean_first_divergence", fixed(r.first_divergence, 2)}});
  }
  return {{"model", run.model},
          {"text_file", run.text_file},
          {"chunk_tokens", run.chunk_tokens},
          {"chunks", run.chunks},
          {"scored_tokens", run.scored_tokens},
          {"bos", run.bos},
          {"prompts", run.prompts},
          {"greedy_tokens", run.greedy_tokens},
          {"f16_bytes_per_token", fixed(run.f16_bytes_per_token, 1)},
          {"baseline_codec", run.baseline_codec},
          {"baseline_perplexity", significant(run.baseline_perplexity)},
          {"f32_local_perplexity", significant(run.f32_local_perplexity)},
          {"variants", std::move(variants)}};
}

void print_kv_quality_table(const KvQualityRun& run) {
  print_line(
      "kv-quality: %s, %d chunks of <= %d tokens%s; first half over the wire, second half scored (%d tokens); "
      "greedy: %d prompts x %d tokens\n",
      run.model, run.chunks, run.chunk_tokens, run.bos ? " (BOS first)" : "", run.scored_tokens, run.prompts,
      run.greedy_tokens);
  print_line("baseline %s handoff: perplexity %.4f (local F32 KV, no handoff: %.4f); raw F16 KV %.0f bytes/token\n",
             run.baseline_codec, run.baseline_perplexity, run.f32_local_perplexity, run.f16_bytes_per_token);
  print_line("  %-22s %-14s %9s %8s %9s %10s %8s %10s %7s %7s\n", "codec", "store", "wire B/t", "vs f16", "store B/t",
             "ppl", "dppl %", "mean KL", "greedy", "1st dif");
  for (const KvQualityRow& r : run.rows) {
    if (!r.error.empty()) {
      print_line("  %-22s skipped: %s\n", r.codec, r.error);
      continue;
    }
    print_line("  %-22s %-14s %9.1f %8.4f %9.0f %10.4f %+8.3f %10.3e %7.3f %7.1f\n", r.codec, r.store_codec,
               r.wire_bpt, r.ratio, r.store_bpt, r.ppl, r.ppl_change_pct, r.mean_kl, r.agreement, r.first_divergence);
  }
}

}  // namespace baton::cli
