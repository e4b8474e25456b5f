#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench_kv_quality.h"
#include "common/util/check.h"
#include "gnuplot_run.h"
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

namespace baton::cli {
namespace {

// "tc-b2.5-w0" -> its curve "tc-w0"; "tc-b1" -> "tc"; "" for other codecs.
std::string transform_family(const std::string& codec) {
  if (codec.rfind("tc-", 0) != 0) return "";
  std::string family = "tc";
  size_t at = codec.find('-', 3);
  if (at != std::string::npos) family += codec.substr(at);
  return family;
}

}  // namespace

absl::Status write_kv_quality_plot(const KvQualityRun& run) {
  BATON_ASSIGN_OR_RETURN(GnuplotRun gnuplot, GnuplotRun::Create("bench-kv-quality"));
  const std::string data_path = gnuplot.path("rd.dat");
  // One data block per tc family (sorted by ratio), then the other codecs.
  std::map<std::string, std::vector<const KvQualityRow*>> families;
  std::vector<const KvQualityRow*> others;
  for (const KvQualityRow& r : run.rows) {
    // Lossless codecs (KL 0) have no place on a log scale.
    if (!r.error.empty() || r.codec == run.baseline_codec || r.mean_kl <= 0) continue;
    const std::string family = transform_family(r.codec);
    (family.empty() ? others : families[family]).push_back(&r);
  }
  std::ofstream data(data_path);
  auto write_row = [&](const KvQualityRow& r) {
    data << r.ratio << ' ' << r.mean_kl << ' ' << r.ppl_change_pct << ' ' << r.codec << '\n';
  };
  std::vector<std::string> names;
  for (auto& [family, rows] : families) {
    std::sort(rows.begin(), rows.end(), [](const KvQualityRow* a, const KvQualityRow* b) { return a->ratio < b->ratio; });
    for (const KvQualityRow* r : rows) write_row(*r);
    data << "\n\n";
    names.push_back(family);
  }
  for (const KvQualityRow* r : others) write_row(*r);
  data.close();
  const size_t n_families = names.size();
  const std::string title =
      absl::StrFormat("baton bench kv-quality: %s, chunks of %d tokens (first half over the wire)", run.model,
                      run.chunk_tokens);
  std::ofstream script(gnuplot.path("plot.gp"));
  script << "set terminal pngcairo size 1000,1000 noenhanced\n"
         << "set output '" << run.plot_path << "'\n"
         << "set multiplot layout 2,1 title '" << title << "'\n"
         << "set grid\nset key top right\nset xlabel 'wire bytes / F16'\n";
  for (int panel = 0; panel < 2; ++panel) {
    const int column = panel == 0 ? 2 : 3;
    script << (panel == 0 ? "set logscale y\nset ylabel 'mean KL(f16 || codec)'\n"
                          : "unset logscale y\nset ylabel 'perplexity change (%)'\n")
           << "plot ";
    for (size_t i = 0; i < n_families; ++i) {
      script << "'" << data_path << "' index " << i << " using 1:" << column << " with linespoints lw 2 pt 7 title '"
             << names[i] << " (bits per element rising)', ";
    }
    script << "'" << data_path << "' index " << n_families << " using 1:" << column
           << " with points pt 5 ps 1.5 lc rgb 'black' title 'int8 / int4 codecs', '' index " << n_families
           << " using 1:" << column << ":4 with labels offset 0,1 font ',8' notitle\n";
  }
  script << "unset multiplot\n";
  script.close();
  return gnuplot.run(run.plot_path);
}

}  // namespace baton::cli
