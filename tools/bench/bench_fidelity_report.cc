#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "bench_fidelity.h"
#include "report.h"

namespace baton::cli {
namespace {

double perplexity(const FidelityRow& r) { return std::exp(r.nll / static_cast<double>(r.scored)); }

}  // namespace

FidelityVerdict fidelity_verdict(const std::vector<FidelityRow>& rows) {
  FidelityVerdict v;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    const FidelityRow& a = rows[i];
    const FidelityRow& b = rows[i + 1];
    if (a.setting != "split" || a.cloud_weights != "f16" || b.cloud_weights != "q4_0" || !a.error.empty() ||
        !b.error.empty() || a.scored == 0 || b.scored == 0) {
      continue;
    }
    const double kl_a = a.kl / a.scored, kl_b = b.kl / b.scored;
    ++v.compared;
    v.f16_kl_sum += kl_a;
    v.q4_kl_sum += kl_b;
    (kl_a <= kl_b ? v.f16_wins : v.q4_wins) += 1;
  }
  if (v.compared > 0) {
    v.recommended = v.f16_wins != v.q4_wins ? (v.f16_wins > v.q4_wins ? "f16" : "q4_0")
                                            : (v.f16_kl_sum <= v.q4_kl_sum ? "f16" : "q4_0");
  }
  return v;
}

Json fidelity_json(const FidelityRun& run) {
  Json rows = Json::array();
  for (const FidelityRow& r : run.rows) {
    Json row = {{"setting", r.setting}, {"cloud_weights", r.cloud_weights}, {"edge_weights", r.edge_weights},
                {"kv", r.kv}};
    if (!r.error.empty()) {
      row["error"] = r.error;
    } else {
      row["perplexity"] = significant(perplexity(r));
      row["mean_kl"] = significant(r.kl / r.scored);
      if (r.wire_tokens > 0) {
        row["wire_bytes_per_token"] =
            fixed(static_cast<double>(r.wire_bytes) / static_cast<double>(r.wire_tokens), 1);
      }
    }
    rows.push_back(std::move(row));
  }
  return {{"model", run.model_path},
          {"edge_model", run.edge_model.empty() ? "(quantized in memory)" : run.edge_model},
          {"tokens_file", run.tokens_file},
          {"window", run.window},
          {"prompt", run.prompt},
          {"windows", run.windows},
          {"scored_tokens", run.rows.front().scored},
          {"protocol", run.protocol},
          {"recommended_cloud_weights", run.verdict.recommended},
          {"rows", std::move(rows)}};
}

void print_fidelity_table(const FidelityRun& run) {
  print_line("fidelity: %s (F16 source) vs the edge's Q4_0 %s; %d windows, %d scored tokens\n", run.model_name,
             run.edge_model.empty() ? "(quantized from it in memory)" : run.edge_model, run.windows,
             run.rows.front().scored);
  print_line("protocol: %s\n", run.protocol);
  print_line("  %-8s %-13s %-6s %-22s %10s %12s %10s\n", "setting", "cloud weights", "edge", "kv codec", "perplexity",
             "mean KL", "wire B/t");
  for (const FidelityRow& r : run.rows) {
    const std::string cloud = r.setting == "split" ? r.cloud_weights : "-";
    if (!r.error.empty()) {
      print_line("  %-8s %-13s %-6s %-22s failed: %s\n", r.setting, cloud, r.edge_weights, r.kv, r.error);
      continue;
    }
    const std::string wire = r.wire_tokens > 0 ? absl::StrFormat("%.1f", static_cast<double>(r.wire_bytes) /
                                                                              static_cast<double>(r.wire_tokens))
                                               : "-";
    print_line("  %-8s %-13s %-6s %-22s %10.4f %12.4e %10s\n", r.setting, cloud, r.edge_weights, r.kv, perplexity(r),
               r.kl / r.scored, wire);
  }
  const FidelityVerdict& v = run.verdict;
  if (v.compared > 0) {
    print_line("default cloud weights: %s (lower mean KL to F16-alone in %d of %d KV codecs; summed mean KL: cloud "
               "f16 %.4e, cloud q4_0 %.4e)\n",
               v.recommended, std::max(v.f16_wins, v.q4_wins), v.compared, v.f16_kl_sum, v.q4_kl_sum);
  }
}

}  // namespace baton::cli
