#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_split.h"

#include "edge_decode/link/cloud_client.h"  // early_tokens_window_bytes
#include "edge_decode/plan/codec_choice.h"
#include "edge_decode/plan/split_policy.h"
#include "gnuplot_run.h"
#include "common/util/check.h"
#include "report.h"

namespace baton::cli {
namespace {

constexpr char kLinkNote[] =
    "WAN modeled, not emulated (this machine's kernel has no netem): transfer = wire bytes / (rate x (1 - loss)), "
    "a crude TCP loss penalty; split TTFT = RTT + max(cloud, first block + transfer) + ingest + last token; "
    "cloud = trailer ProducerStats queue + prefill + encode tail (CPU backend on this machine: the same cores "
    "and CPU engine as the edge, so the CPU rows show the split's overheads, not a faster cloud)";
constexpr char kOverlapNote[] =
    "OVERLAP: the edge prefills [0, a) while the cloud streams [a, n-1); a is the edge's split policy's choice "
    "(decide_split, policy auto, from this length's local tok/s, cloud tok/s, wire bytes/token and the profile: "
    "a = 0 is cloud-only, a = n-1 local); TTFT = max(local part, RTT + max(cloud, first block + transfer of the "
    "streamed share)) + ingest of the share + last token; gain = min(local, cloud-only) TTFT / overlap TTFT";
constexpr char kAutoNote[] =
    "AUTO: per profile and length, the codec the edge's --codec auto picks (choose_codec: the calibration's "
    "quality table less the codecs over the loss floor, each candidate's plan from its own measured figures, the "
    "smallest predicted TTFT, among equally fast cloud plans the least loss) and the overlapped plan with it; "
    "gain = min(local, cloud-only with the baseline codec) / overlap+auto TTFT; vs best = min(local, the fastest "
    "cloud-only codec within the floor) / overlap+auto TTFT";
constexpr char kEarlyNote[] =
    "EARLY: the cloud samples K greedy tokens after the prompt and sends them ahead of the KV still queued "
    "(baseline codec, measured over loopback); early TTFT = RTT + the first early token over loopback (call "
    "start -> the client reads it: the first block's frame) "
    "+ the KV bytes ahead of it / (rate x (1 - loss)), ahead = min(bytes produced - bytes delivered by then "
    "(blocks produced evenly from the first block to the end of the cloud's work), the call's HTTP/2 window "
    "(the edge's early_tokens_window_bytes: 2 x rate x RTT rounded up to a power of two in [64 KiB, 4 MiB])); ratio = plain cloud-only TTFT / early TTFT (> 1: sooner); decoded here = the "
    "split's TTFT with the early call's cloud time (its trailer waits for the K steps) + the edge's extra cost "
    "of prefilling [last token, early tokens] instead of one decode step. PROJECTION: first early token = "
    "projected prompt prefill + one GPU decode step";
constexpr char kProjectionNote[] =
    "PROJECTION: the same formula with cloud = (prompt - 1) / GPU prefill tok/s, first block at the same "
    "fraction of it as measured on the CPU cloud";

// Smallest listed length from which split wins through the end of the list.
std::string crossover(const std::vector<int64_t>& lengths, const std::vector<bool>& split_wins) {
  if (lengths.empty()) return "n/a";
  if (!split_wins.back()) {
    return std::find(split_wins.begin(), split_wins.end(), true) == split_wins.end() ? "never (in range)"
                                                                                      : "none stable (see rows)";
  }
  size_t first = split_wins.size() - 1;
  while (first > 0 && split_wins[first - 1]) --first;
  if (first == 0) return "always (in range)";
  return absl::StrFormat("%d tokens (split wins from here; local wins at %d)", lengths[first], lengths[first - 1]);
}

const char* winner(bool split_wins) { return split_wins ? "split" : "local"; }

Json length_json(const LengthResult& r, double gpu_rate) {
  return {{"prompt_len", r.prompt_len},
          {"local_prefill_ms", fixed(r.local_prefill_ms, 3)},
          {"local_last_token_ms", fixed(r.local_last_token_ms, 3)},
          {"local_ttft_ms", fixed(r.local_ttft_ms, 3)},
          {"cloud_ms", fixed(r.cloud_ms, 3)},
          {"cloud_prefill_ms", fixed(r.cloud_prefill_ms, 3)},
          {"first_block_ms", fixed(r.first_block_ms, 3)},
          {"receive_ms", fixed(r.receive_ms, 3)},
          {"ingest_ms", fixed(r.ingest_ms, 3)},
          {"split_last_token_ms", fixed(r.split_last_token_ms, 3)},
          {"loopback_split_ttft_ms", fixed(r.loopback_split_ttft_ms, 3)},
          {"wire_bytes", r.wire_bytes},
          {"quantized_bytes", r.quantized_bytes},
          {"decode_tok_per_s_mean", fixed(r.decode_mean_tok_s, 3)},
          {"decode_p99_ms", fixed(r.decode_p99_ms, 3)},
          {"decode_tok_per_s_p99", fixed(r.decode_p99_tok_s, 3)},
          {"first_tokens_match", r.first_tokens_match},
          {"projection_gpu_prefill_tok_per_s", fixed(gpu_rate, 1)}};
}

// The early call's measured figures of one length.
Json early_length_json(const LengthResult& r) {
  return {{"k", r.early_asked},
          {"received", r.early_received},
          {"first_early_ms", fixed(r.first_early_ms, 3)},
          {"cloud_first_early_ms", fixed(r.early_cloud_ms, 3)},
          {"stream_cloud_ms", fixed(r.early_stream_cloud_ms, 3)},
          {"early_delta_ms", fixed(r.early_delta_ms, 3)},
          {"first_token_matches_local", r.early_first_matches}};
}

// One modeled early row (CPU cloud or PROJECTION) of a profile.
Json early_row_json(const LengthResult& r, const EarlyRow& row, bool projection) {
  Json out = {{"k", r.early_asked},
              {"plain_split_ttft_ms", fixed(row.plain_ms, 3)},
              {"ahead_bytes", whole(row.ahead_bytes)},
              {"early_ttft_ms", fixed(row.ttft_ms, 3)},
              {"ratio", fixed(row.ratio, 3)},
              {"local_first_ms", fixed(row.decoded_here_ms, 3)}};
  if (!projection) out["first_early_ms"] = fixed(r.first_early_ms, 3);  // loopback, measured
  return out;
}

Json profile_json(const SplitRun& run, const CodecRun& codec, size_t p) {
  const WanProfile& profile = run.profiles[p];
  const ProfileRows& rows = codec.per_profile[p];
  Json out = Json::array();
  for (size_t i = 0; i < codec.results.size(); ++i) {
    const LengthResult& r = codec.results[i];
    Json row = {{"prompt_len", r.prompt_len},
                {"local_ttft_ms", fixed(r.local_ttft_ms, 3)},
                {"split_ttft_ms", fixed(rows.split_ms[i], 3)},
                {"wire_bytes", r.wire_bytes},
                {"decode_tok_per_s_mean", fixed(r.decode_mean_tok_s, 3)},
                {"decode_tok_per_s_p99", fixed(r.decode_p99_tok_s, 3)},
                {"winner", winner(rows.split_wins[i])},
                {"projection_split_ttft_ms", fixed(rows.projection_ms[i], 3)},
                {"projection_winner", winner(rows.projection_wins[i])},
                {"overlap_split_position", rows.overlap[i].split_position},
                {"overlap_place", rows.overlap[i].place},
                {"overlap_ttft_ms", fixed(rows.overlap[i].ttft_ms, 3)},
                {"overlap_gain", fixed(rows.overlap[i].gain, 3)},
                {"projection_overlap_split_position", rows.projection_overlap[i].split_position},
                {"projection_overlap_place", rows.projection_overlap[i].place},
                {"projection_overlap_ttft_ms", fixed(rows.projection_overlap[i].ttft_ms, 3)},
                   {"projection_overlap_gain", fixed(rows.projection_overlap[i].gain, 3)}};
    if (i < rows.early.size()) {
      row["early"] = early_row_json(r, rows.early[i], /*projection=*/false);
      row["projection_early"] = early_row_json(r, rows.projection_early[i], /*projection=*/true);
    }
    out.push_back(std::move(row));
  }
  return {{"name", profile.name},
          {"bandwidth_bytes_per_s", whole(profile.bandwidth_bytes_per_s)},
          {"rtt_ms", fixed(profile.rtt_ms, 3)},
          {"loss", fixed(profile.loss, 4)},
          {"rows", std::move(out)},
          {"crossover", crossover(run.lengths, rows.split_wins)},
          {"projection_crossover", crossover(run.lengths, rows.projection_wins)}};
}

void print_profile_table(const SplitRun& run, const CodecRun& codec, size_t p) {
  const WanProfile& profile = run.profiles[p];
  const ProfileRows& rows = codec.per_profile[p];
  print_line("\nprofile %s: %.1f Mbit/s, RTT %.0f ms, loss %.2f%%\n", profile.name,
             profile.bandwidth_bytes_per_s * 8 / 1e6, profile.rtt_ms, profile.loss * 100);
  print_line("  %7s %11s %11s %11s %10s %9s %7s %7s %11s %6s | %15s %10s %9s %7s %11s %6s\n", "prompt",
             "local TTFT", "split TTFT", "wire bytes", "dec tok/s", "dec p99", "winner", "ovl a", "ovl TTFT", "gain",
             "PROJ split TTFT", "PROJ win", "GPU tok/s", "PROJ a", "PROJ ovl", "gain");
  for (size_t i = 0; i < codec.results.size(); ++i) {
    const LengthResult& r = codec.results[i];
    const OverlapRow& o = rows.overlap[i];
    const OverlapRow& po = rows.projection_overlap[i];
    print_line("  %7d %11.1f %11.1f %11d %10.2f %9.2f %7s %7d %11.1f %5.2fx | %15.1f %10s %9.0f %7d %11.1f %5.2fx\n",
               r.prompt_len, r.local_ttft_ms, rows.split_ms[i], r.wire_bytes, r.decode_mean_tok_s, r.decode_p99_tok_s,
               winner(rows.split_wins[i]), o.split_position, o.ttft_ms, o.gain, rows.projection_ms[i],
               winner(rows.projection_wins[i]), run.gpu_rates[i], po.split_position, po.ttft_ms, po.gain);
  }
  print_line("  crossover (CPU cloud): %s\n", crossover(run.lengths, rows.split_wins));
  print_line("  crossover (PROJECTION, GPU cloud): %s\n", crossover(run.lengths, rows.projection_wins));
}

// Per profile, the early-token rows of the baseline codec: CPU cloud and
// PROJECTION side by side.
void print_early_table(const SplitRun& run, size_t p) {
  const CodecRun& base = run.codecs[0];
  const ProfileRows& rows = base.per_profile[p];
  if (rows.early.empty()) return;
  print_line("\nprofile %s, early tokens (K = %d, %s): TTFT in ms\n", run.profiles[p].name, run.early_tokens,
             base.codec);
  print_line("  %7s %5s %11s %11s %11s %7s %13s | %11s %11s %7s %13s\n", "prompt", "got", "1st early", "plain split",
             "early TTFT", "ratio", "decoded here", "PROJ plain", "PROJ early", "ratio", "PROJ decoded");
  for (size_t i = 0; i < base.results.size(); ++i) {
    const LengthResult& r = base.results[i];
    const EarlyRow& e = rows.early[i];
    const EarlyRow& pe = rows.projection_early[i];
    print_line("  %7d %5d %11.1f %11.1f %11.1f %6.2fx %13.1f | %11.1f %11.1f %6.2fx %13.1f\n", r.prompt_len,
               r.early_received, r.first_early_ms, e.plain_ms, e.ttft_ms, e.ratio, e.decoded_here_ms, pe.plain_ms,
               pe.ttft_ms, pe.ratio, pe.decoded_here_ms);
  }
}

Json codec_json(const SplitRun& run, const CodecRun& codec) {
  Json lengths = Json::array(), profiles = Json::array();
  for (size_t i = 0; i < codec.results.size(); ++i) {
    Json length = length_json(codec.results[i], run.gpu_rates[i]);
    if (codec.results[i].early_asked > 0) length["early"] = early_length_json(codec.results[i]);
    lengths.push_back(std::move(length));
  }
  for (size_t p = 0; p < run.profiles.size(); ++p) profiles.push_back(profile_json(run, codec, p));
  return {{"codec", codec.codec},
          {"store", codec.store},
          {"store_bytes_per_token", whole(codec.store_bytes_per_token)},
          {"lengths", std::move(lengths)},
          {"profiles", std::move(profiles)}};
}

Json auto_row_json(const SplitRun& run, const AutoRow& row) {
  return {{"codec", run.codecs[row.codec].codec},
          {"overlap_split_position", row.overlap.split_position},
          {"overlap_place", row.overlap.place},
          {"overlap_ttft_ms", fixed(row.overlap.ttft_ms, 3)},
          {"baseline_ttft_ms", fixed(row.baseline_ms, 3)},
          {"best_fixed_ttft_ms", fixed(row.best_fixed_ms, 3)},
          {"gain", fixed(row.gain, 3)},
          {"gain_vs_best", fixed(row.gain_vs_best, 3)},
          {"reason", row.reason}};
}

Json auto_json(const SplitRun& run) {
  Json table = Json::array(), profiles = Json::array();
  for (const KvCodecQuality& q : run.table) {
    table.push_back({{"codec", q.codec},
                     {"wire_ratio", fixed(q.wire_ratio, 4)},
                     {"ppl_delta_pct", fixed(q.ppl_delta_pct, 4)},
                     {"mean_kl", fixed(q.mean_kl, 6)}});
  }
  for (size_t p = 0; p < run.profiles.size(); ++p) {
    Json rows = Json::array();
    for (size_t i = 0; i < run.lengths.size(); ++i) {
      Json cloud_only = Json::object(), projection_cloud_only = Json::object();
      for (const CodecRun& codec : run.codecs) {
        cloud_only[codec.codec] = fixed(codec.per_profile[p].split_ms[i], 3);
        projection_cloud_only[codec.codec] = fixed(codec.per_profile[p].projection_ms[i], 3);
      }
      rows.push_back({{"prompt_len", run.lengths[i]},
                      {"local_ttft_ms", fixed(run.codecs[0].results[i].local_ttft_ms, 3)},
                      {"cloud_only_ttft_ms", std::move(cloud_only)},
                      {"auto", auto_row_json(run, run.auto_rows[p].rows[i])},
                      {"projection_cloud_only_ttft_ms", std::move(projection_cloud_only)},
                      {"projection_auto", auto_row_json(run, run.auto_rows[p].projection[i])}});
    }
    profiles.push_back({{"name", run.profiles[p].name}, {"rows", std::move(rows)}});
  }
  return {{"note", kAutoNote},
          {"calibration", run.calibration},
          {"max_kv_loss_pct", fixed(run.max_kv_loss_pct, 3)},
          {"baseline", run.codecs[0].codec},
          {"quality_table", std::move(table)},
          {"profiles", std::move(profiles)}};
}

// Per profile, CPU cloud or PROJECTION: TTFT of local, cloud-only with each
// codec, and (with auto) overlap+auto with its codec, split and gains.
void print_codecs_table(const SplitRun& run, size_t p, bool projection) {
  const WanProfile& profile = run.profiles[p];
  print_line("\nprofile %s: %.1f Mbit/s, RTT %.0f ms, loss %.2f%%, %s: TTFT in ms\n", profile.name,
             profile.bandwidth_bytes_per_s * 8 / 1e6, profile.rtt_ms, profile.loss * 100,
             projection ? "PROJECTION (GPU cloud)" : "CPU cloud");
  std::string header = absl::StrFormat("  %7s %10s", "prompt", "local");
  for (const CodecRun& codec : run.codecs) absl::StrAppend(&header, absl::StrFormat(" %*s", std::max<int>(9, codec.codec.size()), codec.codec));
  if (run.auto_codec) {
    absl::StrAppend(&header, absl::StrFormat(" | %-20s %7s %8s %7s %7s", "auto codec", "ovl a", "ovl+auto", "gain",
                                             "vs best"));
  }
  print_line("%s\n", header);
  for (size_t i = 0; i < run.lengths.size(); ++i) {
    std::string line = absl::StrFormat("  %7d %10.1f", run.lengths[i], run.codecs[0].results[i].local_ttft_ms);
    for (const CodecRun& codec : run.codecs) {
      const ProfileRows& rows = codec.per_profile[p];
      absl::StrAppend(&line, absl::StrFormat(" %*.1f", std::max<int>(9, codec.codec.size()),
                                             projection ? rows.projection_ms[i] : rows.split_ms[i]));
    }
    if (run.auto_codec) {
      const AutoRow& row = projection ? run.auto_rows[p].projection[i] : run.auto_rows[p].rows[i];
      absl::StrAppend(&line, absl::StrFormat(" | %-20s %7d %8.1f %6.2fx %6.2fx", run.codecs[row.codec].codec,
                                             row.overlap.split_position, row.overlap.ttft_ms, row.gain,
                                             row.gain_vs_best));
    }
    print_line("%s\n", line);
  }
  for (const CodecRun& codec : run.codecs) {
    const ProfileRows& rows = codec.per_profile[p];
    print_line("  crossover (%s, %s): %s\n", projection ? "PROJECTION, GPU cloud" : "CPU cloud", codec.codec,
               crossover(run.lengths, projection ? rows.projection_wins : rows.split_wins));
  }
}

// Whether codec `name` is within the run's loss floor per the quality table
// (a codec the table lacks: only the baseline counts, as the edge's default).
bool within_floor(const SplitRun& run, const std::string& name, bool baseline) {
  for (const KvCodecQuality& q : run.table) {
    if (q.codec == name) return q.ppl_delta_pct <= run.max_kv_loss_pct;
  }
  return baseline;
}

}  // namespace

AutoRow modeled_auto(const SplitRun& run, size_t p, size_t i, bool projection) {
  const WanProfile& profile = run.profiles[p];
  // The cloud's work and first block of codec k at length i.
  auto cloud_of = [&](size_t k, double* cloud_ms, double* first_block_ms) {
    const LengthResult& r = run.codecs[k].results[i];
    if (projection) {
      projected_cloud(r, run.gpu_rates[i], cloud_ms, first_block_ms);
    } else {
      *cloud_ms = r.cloud_ms;
      *first_block_ms = r.first_block_ms;
    }
  };
  auto index_of = [&](const KvCodecConfig& codec) -> std::optional<size_t> {
    const std::string name = codec.to_string();
    for (size_t k = 0; k < run.codecs.size(); ++k) {
      if (run.codecs[k].codec == name) return k;
    }
    return std::nullopt;
  };
  CodecChoiceInputs in;
  in.table = run.table;
  in.max_loss_pct = run.max_kv_loss_pct;
  in.f16_bytes_per_token = run.f16_bytes_per_token;
  in.fallback = run.codecs[0].config;
  in.usable = [&](const KvCodecConfig& codec) {
    return index_of(codec).has_value() ? absl::OkStatus() : absl::NotFoundError("not measured in this run");
  };
  in.split_inputs = [&](const KvCodecConfig& codec) {
    const size_t k = *index_of(codec);
    double cloud_ms = 0, first_block_ms = 0;
    cloud_of(k, &cloud_ms, &first_block_ms);
    return split_inputs_of(run.codecs[k].results[i], profile, cloud_ms);
  };
  const CodecChoice choice = choose_codec(in);
  AutoRow row;
  row.codec = index_of(choice.codec).value_or(0);
  row.reason = choice.reason;
  double cloud_ms = 0, first_block_ms = 0;
  cloud_of(row.codec, &cloud_ms, &first_block_ms);
  row.overlap = modeled_overlap(run.codecs[row.codec].results[i], profile, cloud_ms, first_block_ms);
  const double local_ms = run.codecs[0].results[i].local_ttft_ms;
  row.baseline_ms = row.best_fixed_ms = local_ms;
  for (size_t k = 0; k < run.codecs.size(); ++k) {
    cloud_of(k, &cloud_ms, &first_block_ms);
    const double split_ms = modeled_split_ttft_ms(run.codecs[k].results[i], profile, cloud_ms, first_block_ms);
    if (k == 0) row.baseline_ms = std::min(row.baseline_ms, split_ms);
    if (within_floor(run, run.codecs[k].codec, k == 0)) row.best_fixed_ms = std::min(row.best_fixed_ms, split_ms);
  }
  row.gain = row.overlap.ttft_ms > 0 ? row.baseline_ms / row.overlap.ttft_ms : 0.0;
  row.gain_vs_best = row.overlap.ttft_ms > 0 ? row.best_fixed_ms / row.overlap.ttft_ms : 0.0;
  return row;
}

SplitInputs split_inputs_of(const LengthResult& r, const WanProfile& profile, double cloud_ms) {
  const double tokens = static_cast<double>(r.prompt_len - 1);
  SplitInputs in;
  in.policy = PrefillPolicy::kAuto;
  in.cloud_configured = in.cloud_reachable = true;
  in.prefill_tokens = static_cast<uint32_t>(r.prompt_len - 1);
  in.local_prefill_tokens_per_s = tokens / std::max(r.local_prefill_ms, 1e-3) * 1000.0;
  in.cloud_prefill_tokens_per_s = tokens / std::max(cloud_ms, 1e-3) * 1000.0;
  in.link_bytes_per_s = profile.bandwidth_bytes_per_s * (1.0 - profile.loss);
  in.link_rtt_ms = std::max(profile.rtt_ms, 1e-3);  // 0 would read "unknown"
  in.cloud_call_overhead_ms = in.link_rtt_ms + r.ingest_ms;
  in.wire_bytes_per_token = static_cast<double>(r.wire_bytes) / tokens;
  return in;
}

OverlapRow modeled_overlap(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms) {
  const double tokens = static_cast<double>(r.prompt_len - 1);
  const SplitPlan plan = decide_split(split_inputs_of(r, profile, cloud_ms));
  OverlapRow row;
  row.split_position = plan.split_position;
  row.place = prefill_place_name(plan.place);
  const double streamed = (tokens - static_cast<double>(plan.split_position)) / tokens;  // share of [0, n-1)
  const double local_part = r.local_prefill_ms * (1.0 - streamed);
  const double transfer_ms =
      streamed * static_cast<double>(r.wire_bytes) / (profile.bandwidth_bytes_per_s * (1.0 - profile.loss)) * 1000.0;
  const double cloud_part = streamed > 0 ? profile.rtt_ms + std::max(cloud_ms, first_block_ms + transfer_ms) : 0.0;
  row.ttft_ms = streamed > 0 ? std::max(local_part, cloud_part) + streamed * r.ingest_ms + r.split_last_token_ms
                             : r.local_ttft_ms;
  const double best_single = std::min(r.local_ttft_ms, modeled_split_ttft_ms(r, profile, cloud_ms, first_block_ms));
  row.gain = row.ttft_ms > 0 ? best_single / row.ttft_ms : 0.0;
  return row;
}

double modeled_split_ttft_ms(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms) {
  const double transfer_ms =
      static_cast<double>(r.wire_bytes) / (profile.bandwidth_bytes_per_s * (1.0 - profile.loss)) * 1000.0;
  return profile.rtt_ms + std::max(cloud_ms, first_block_ms + transfer_ms) + r.ingest_ms + r.split_last_token_ms;
}

double transport_window_bytes(const WanProfile& profile) {
  return static_cast<double>(early_tokens_window_bytes(profile.bandwidth_bytes_per_s, profile.rtt_ms));
}

double bytes_ahead(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms,
                   double at_ms) {
  const double since_first_block_ms = std::max(0.0, at_ms - first_block_ms);
  const double produced_fraction =
      cloud_ms > first_block_ms ? std::clamp(since_first_block_ms / (cloud_ms - first_block_ms), 0.0, 1.0) : 1.0;
  const double produced = static_cast<double>(r.wire_bytes) * produced_fraction;
  const double delivered = profile.bandwidth_bytes_per_s * (1.0 - profile.loss) * since_first_block_ms / 1000.0;
  return std::min(std::max(0.0, produced - delivered), transport_window_bytes(profile));
}

EarlyRow modeled_early(const LengthResult& r, const WanProfile& profile, const EarlyCloud& cloud) {
  EarlyRow row;
  row.plain_ms = modeled_split_ttft_ms(r, profile, cloud.cloud_ms, cloud.first_block_ms);
  row.ahead_bytes = bytes_ahead(r, profile, cloud.cloud_ms, cloud.first_block_ms, cloud.first_early_ms);
  row.ttft_ms = profile.rtt_ms + cloud.first_early_ms +
                row.ahead_bytes / (profile.bandwidth_bytes_per_s * (1.0 - profile.loss)) * 1000.0;
  row.ratio = row.ttft_ms > 0 ? row.plain_ms / row.ttft_ms : 0.0;
  row.decoded_here_ms =
      modeled_split_ttft_ms(r, profile, cloud.stream_cloud_ms, cloud.first_block_ms) + r.early_delta_ms;
  return row;
}

EarlyCloud projected_early_cloud(const LengthResult& r, double gpu_tok_s, double decode_step_ms) {
  EarlyCloud cloud;
  projected_cloud(r, gpu_tok_s, &cloud.cloud_ms, &cloud.first_block_ms);
  cloud.first_early_ms = cloud.cloud_ms + decode_step_ms;
  cloud.stream_cloud_ms = cloud.cloud_ms + static_cast<double>(r.early_asked) * decode_step_ms;
  return cloud;
}

void projected_cloud(const LengthResult& r, double gpu_tok_s, double* cloud_ms, double* first_block_ms) {
  *cloud_ms = static_cast<double>(r.prompt_len - 1) / gpu_tok_s * 1000.0;
  const double fraction = r.cloud_ms > 0 ? std::min(1.0, r.first_block_ms / r.cloud_ms) : 1.0;
  *first_block_ms = *cloud_ms * fraction;
}

void model_profiles(SplitRun& run) {
  for (CodecRun& codec : run.codecs) {
    codec.per_profile.assign(run.profiles.size(), {});
    for (size_t p = 0; p < run.profiles.size(); ++p) {
      ProfileRows& rows = codec.per_profile[p];
      for (size_t i = 0; i < codec.results.size(); ++i) {
        const LengthResult& r = codec.results[i];
        const double split = modeled_split_ttft_ms(r, run.profiles[p], r.cloud_ms, r.first_block_ms);
        double cloud_ms = 0, first_block_ms = 0;
        projected_cloud(r, run.gpu_rates[i], &cloud_ms, &first_block_ms);
        const double projection = modeled_split_ttft_ms(r, run.profiles[p], cloud_ms, first_block_ms);
        rows.split_ms.push_back(split);
        rows.projection_ms.push_back(projection);
        rows.split_wins.push_back(split < r.local_ttft_ms);
        rows.projection_wins.push_back(projection < r.local_ttft_ms);
        rows.overlap.push_back(modeled_overlap(r, run.profiles[p], r.cloud_ms, r.first_block_ms));
        rows.projection_overlap.push_back(modeled_overlap(r, run.profiles[p], cloud_ms, first_block_ms));
        if (r.early_asked > 0) {
          const EarlyCloud measured{r.cloud_ms, r.first_block_ms, r.first_early_ms, r.early_stream_cloud_ms};
          rows.early.push_back(modeled_early(r, run.profiles[p], measured));
          rows.projection_early.push_back(modeled_early(
              r, run.profiles[p], projected_early_cloud(r, run.gpu_rates[i], run.gpu_decode_step_ms)));
        }
      }
    }
  }
  run.auto_rows.assign(run.auto_codec ? run.profiles.size() : 0, {});
  for (size_t p = 0; p < run.auto_rows.size(); ++p) {
    for (size_t i = 0; i < run.lengths.size(); ++i) {
      run.auto_rows[p].rows.push_back(modeled_auto(run, p, i, /*projection=*/false));
      run.auto_rows[p].projection.push_back(modeled_auto(run, p, i, /*projection=*/true));
    }
  }
}

Json split_json(const SplitRun& run) {
  // The baseline's fields at the top (as a one-codec run has them), every
  // codec under "codecs", the auto rows under "auto".
  Json out = codec_json(run, run.codecs[0]);
  out.update(Json{{"model", run.model_name},
                  {"edge_model", run.edge_model},
                  {"cloud_model", run.cloud_model},
                  {"threads", run.threads},
                  {"decode_tokens", run.decode_tokens},
                  {"repeat", run.repeat},
                  {"cloud_backend", "cpu"},
                  {"link_model", kLinkNote},
                  {"projection_note", kProjectionNote},
                  {"overlap_note", kOverlapNote},
                  {"gpu_prefill_source", run.gpu_source}});
  Json codecs = Json::array();
  for (const CodecRun& codec : run.codecs) codecs.push_back(codec_json(run, codec));
  out["codecs"] = std::move(codecs);
  if (run.auto_codec) out["auto"] = auto_json(run);
  out["early_tokens"] = run.early_tokens;
  if (run.early_tokens > 0) {
    out["early_note"] = kEarlyNote;
    out["projection_gpu_decode_step_ms"] = fixed(run.gpu_decode_step_ms, 6);
    out["projection_gpu_decode_source"] = run.gpu_decode_source;
  }
  if (!run.plot_path.empty()) out["plot"] = run.plot_path;
  return out;
}

void print_split_tables(const SplitRun& run) {
  const CodecRun& base = run.codecs[0];
  print_line("split benchmark: %s (edge %s, cloud %s), %d codec(s), baseline %s -> store %s (%.0f B/token), %d "
             "threads, CPU cloud on loopback, %d decode tokens, median of %d runs per length\n",
             run.model_name, run.edge_model, run.cloud_model, run.codecs.size(), base.codec, base.store,
             base.store_bytes_per_token, run.threads, run.decode_tokens, run.repeat);
  print_line("\nmeasured on this machine (ms; cloud = queue + prefill + encode tail from the trailer; local into the "
             "baseline's store):\n");
  print_line("  %-22s %7s %10s %8s %10s %10s %10s %8s %8s %12s %11s %9s %9s %5s\n", "codec", "prompt", "local pre",
             "local/s", "local TTFT", "cloud", "1st block", "ingest", "last tok", "loopback TTFT", "wire bytes",
             "dec tok/s", "dec p99", "same");
  for (const CodecRun& codec : run.codecs) {
    for (const LengthResult& r : codec.results) {
      print_line("  %-22s %7d %10.1f %8.1f %10.1f %10.1f %10.1f %8.2f %8.2f %12.1f %11d %9.2f %9.2f %5s\n",
                 codec.codec, r.prompt_len, r.local_prefill_ms,
                 static_cast<double>(r.prompt_len - 1) * 1000.0 / r.local_prefill_ms, r.local_ttft_ms, r.cloud_ms,
                 r.first_block_ms, r.ingest_ms, r.split_last_token_ms, r.loopback_split_ttft_ms, r.wire_bytes,
                 r.decode_mean_tok_s, r.decode_p99_tok_s, r.first_tokens_match ? "yes" : "no");
    }
  }
  print_line("  (local/s = prefill tok/s; dec tok/s = mean over the decode tokens, dec p99 = 1 / p99 step time; "
             "same = split's first token equals local's, greedy)\n");
  print_line("\n%s\n%s; GPU prefill tok/s: %s\n%s\n", kLinkNote, kProjectionNote, run.gpu_source, kOverlapNote);
  if (run.early_tokens > 0) {
    print_line("%s; GPU decode step %.4g ms: %s\n", kEarlyNote, run.gpu_decode_step_ms, run.gpu_decode_source);
  }
  if (run.codecs.size() == 1 && !run.auto_codec) {
    for (size_t p = 0; p < run.profiles.size(); ++p) {
      print_profile_table(run, base, p);
      print_early_table(run, p);
    }
    return;
  }
  if (run.auto_codec) {
    print_line("%s\nquality table (%s), floor %+.2f%%:", kAutoNote, run.calibration, run.max_kv_loss_pct);
    for (const KvCodecQuality& q : run.table) {
      print_line(" %s %.3f/F16 %+.2f%%;", q.codec, q.wire_ratio, q.ppl_delta_pct);
    }
    print_line("\n");
  }
  for (size_t p = 0; p < run.profiles.size(); ++p) {
    print_codecs_table(run, p, /*projection=*/false);
    print_codecs_table(run, p, /*projection=*/true);
    print_early_table(run, p);
  }
  if (run.auto_codec) {
    print_line("\nauto's reason at the longest prompt (CPU cloud):\n");
    for (size_t p = 0; p < run.profiles.size(); ++p) {
      print_line("  %s: %s\n", run.profiles[p].name, run.auto_rows[p].rows.back().reason);
    }
  }
}

namespace {

// "GPU 52000 tok/s", or "ASSUMED GPU ..." when no device report gave it.
std::string gpu_label(const SplitRun& run) {
  return absl::StrFormat("%sGPU %.0f tok/s", run.gpu_source.rfind("ASSUMED", 0) == 0 ? "ASSUMED " : "",
                         run.gpu_rates.back());
}

// Two rows of panels, CPU cloud above and PROJECTION (GPU cloud) below, one
// panel per profile: local, cloud-only with each codec and overlap+auto.
absl::Status write_codecs_plot(const SplitRun& run) {
  BATON_ASSIGN_OR_RETURN(GnuplotRun gnuplot, GnuplotRun::Create("bench-split"));
  const std::string data_path = gnuplot.path("ttft.dat");
  std::ofstream data(data_path);
  // Columns: prompt, local, then per (row, profile): each codec, then auto,
  // then the baseline's early TTFT.
  const bool early = !run.codecs[0].per_profile.empty() && !run.codecs[0].per_profile[0].early.empty();
  for (size_t i = 0; i < run.lengths.size(); ++i) {
    data << run.lengths[i] << ' ' << run.codecs[0].results[i].local_ttft_ms;
    for (const bool projection : {false, true}) {
      for (size_t p = 0; p < run.profiles.size(); ++p) {
        for (const CodecRun& codec : run.codecs) {
          data << ' ' << (projection ? codec.per_profile[p].projection_ms[i] : codec.per_profile[p].split_ms[i]);
        }
        if (run.auto_codec) {
          const AutoProfileRows& rows = run.auto_rows[p];
          data << ' ' << (projection ? rows.projection[i] : rows.rows[i]).overlap.ttft_ms;
        }
        if (early) {
          const ProfileRows& rows = run.codecs[0].per_profile[p];
          data << ' ' << (projection ? rows.projection_early[i] : rows.early[i]).ttft_ms;
        }
      }
    }
    data << '\n';
  }
  data.close();
  const size_t per_panel = run.codecs.size() + (run.auto_codec ? 1 : 0) + (early ? 1 : 0);
  const size_t k = run.profiles.size();
  std::ofstream script(gnuplot.path("plot.gp"));
  script << "set terminal pngcairo size " << 560 * k << ",1300 noenhanced\n"
         << "set output '" << run.plot_path << "'\n"
         << "set multiplot layout 2," << k << " title 'baton bench split: " << run.model_name << ", "
         << run.threads << " edge threads; top: CPU cloud, bottom: PROJECTION (" << gpu_label(run) << ")'\n"
         << "set xlabel 'prompt tokens'\nset ylabel 'time to first token (ms)'\n"
         << "set logscale x 2\nset logscale y\nset grid\nset key below\n";
  const char* colors[] = {"#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
                          "#bcbd22", "#17becf"};
  for (size_t row = 0; row < 2; ++row) {
    for (size_t p = 0; p < k; ++p) {
      const size_t first = 3 + (row * k + p) * per_panel;
      script << "set title '" << run.profiles[p].name << (row == 0 ? " (CPU cloud)" : " (PROJECTION)") << "'\n"
             << "plot '" << data_path << "' using 1:2 with linespoints lw 2 lc rgb 'black' title 'local'";
      for (size_t c = 0; c < run.codecs.size(); ++c) {
        script << ", '' using 1:" << first + c << " with linespoints lw 1 lc rgb '" << colors[c % 10]
               << "' title 'cloud-only " << run.codecs[c].codec << "'";
      }
      if (run.auto_codec) {
        script << ", '' using 1:" << first + run.codecs.size()
               << " with linespoints lw 3 pt 7 dt 2 lc rgb 'red' title 'overlap + auto'";
      }
      if (early) {
        script << ", '' using 1:" << first + per_panel - 1 << " with linespoints lw 2 pt 5 dt 4 lc rgb '#e377c2' "
               << "title 'early token (K = " << run.early_tokens << ", " << run.codecs[0].codec << ")'";
      }
      script << "\n";
    }
  }
  script << "unset multiplot\n";
  script.close();
  return gnuplot.run(run.plot_path);
}

}  // namespace

absl::Status write_split_plot(const SplitRun& run) {
  if (run.codecs.size() > 1 || run.auto_codec) return write_codecs_plot(run);
  const CodecRun& codec = run.codecs[0];
  const std::string title = absl::StrFormat(
      "baton bench split: %s, codec %s, edge %d threads (PROJECTION dashed, overlap dotted, early: squares)",
      run.model_name, codec.codec, run.threads);
  BATON_ASSIGN_OR_RETURN(GnuplotRun gnuplot, GnuplotRun::Create("bench-split"));
  const std::string data_path = gnuplot.path("ttft.dat");
  std::ofstream data(data_path);
  BATON_CHECK(run.gpu_rates.size() == codec.results.size());
  const bool early = !codec.per_profile.empty() && !codec.per_profile[0].early.empty();
  for (size_t i = 0; i < codec.results.size(); ++i) {
    data << codec.results[i].prompt_len << ' ' << codec.results[i].local_ttft_ms;
    for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.split_ms[i];
    for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.projection_ms[i];
    for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.overlap[i].ttft_ms;
    for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.projection_overlap[i].ttft_ms;
    if (early) {
      for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.early[i].ttft_ms;
      for (const ProfileRows& rows : codec.per_profile) data << ' ' << rows.projection_early[i].ttft_ms;
    }
    data << '\n';
  }
  data.close();
  std::ofstream script(gnuplot.path("plot.gp"));
  script << "set terminal pngcairo size 1000," << (early ? 900 : 750) << " noenhanced\n"
         << "set output '" << run.plot_path << "'\n"
         << "set title '" << title << "'\n"
         << "set xlabel 'prompt tokens'\nset ylabel 'time to first token (ms)'\n"
         << "set logscale x 2\nset logscale y\nset grid\nset key below\n"
         << "plot '" << data_path << "' using 1:2 with linespoints lw 2 lc rgb 'black' title 'local (edge prefill)'";
  const char* colors[] = {"#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e"};
  const size_t k = run.profiles.size();
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + i << " with linespoints lw 2 lc rgb '" << colors[i % 5] << "' title 'split "
           << run.profiles[i].name << " (CPU cloud)'";
  }
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + k + i << " with lines dt 2 lw 2 lc rgb '" << colors[i % 5]
           << "' title 'PROJECTION split " << run.profiles[i].name << " (" << gpu_label(run) << ")'";
  }
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + 2 * k + i << " with linespoints dt 3 pt 6 lw 2 lc rgb '" << colors[i % 5]
           << "' title 'overlap " << run.profiles[i].name << " (CPU cloud)'";
  }
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + 3 * k + i << " with lines dt 4 lw 1 lc rgb '" << colors[i % 5]
           << "' title 'PROJECTION overlap " << run.profiles[i].name << "'";
  }
  for (size_t i = 0; early && i < k; ++i) {
    script << ", '' using 1:" << 3 + 4 * k + i << " with linespoints dt 5 pt 5 lw 2 lc rgb '" << colors[i % 5]
           << "' title 'early token " << run.profiles[i].name << " (CPU cloud)'";
  }
  for (size_t i = 0; early && i < k; ++i) {
    script << ", '' using 1:" << 3 + 5 * k + i << " with lines dt 6 lw 1 lc rgb '" << colors[i % 5]
           << "' title 'PROJECTION early token " << run.profiles[i].name << "'";
  }
  script << "\n";
  script.close();
  return gnuplot.run(run.plot_path);
}

}  // namespace baton::cli
