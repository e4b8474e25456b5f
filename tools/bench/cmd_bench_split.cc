// `baton bench split`: when does the split pay? For each prompt length, one
// process measures for real, on this machine:
//   local  the edge's own prefill of the prompt into its QuantizedKvCache (the
//          codec's store config), then the first token;
//   cloud  a real PrefillService + PrefillServer (CPU backend) on 127.0.0.1:0
//          and a real gRPC client reading the KV stream (header .. trailer)
//          through read_kv_segment into an edge store of the same config; the
//          edge then runs the last prompt token itself (the n-1 rule);
//   decode tokens/s over the ingested KV (mean and p99 of the step times).
// The WAN between cloud and edge is modeled from deploy/wan/profiles, not
// emulated (this machine's kernel has no netem): per profile (bandwidth B
// bytes/s, RTT R ms, loss p)
//   transfer  = wire_bytes / (B * (1 - p))            (a crude TCP loss penalty)
//   split TTFT = R + max(cloud_ms, first_block_ms + transfer) + ingest_ms + last_token_ms
// because blocks stream while the cloud computes. PROJECTION rows use the
// same formula with cloud_ms = prompt tokens / GPU prefill tok/s (from a CUDA
// device check's bench.jsonl, --gpu-prefill-tok-s, or an assumption that is
// printed as such).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "bench_commands.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/kv/kv_codec_config.h"
#include "common/kv/kv_codec_params.h"
#include "common/kv/kv_fingerprint.h"
#include "common/kv/kv_handoff.h"
#include "common/kv/quantized_kv_cache.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/flags.h"
#include "kv_codec_list.h"
#include "proto/baton.grpc.pb.h"
#include "report.h"

namespace baton::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One WAN profile: a line "NAME RATE RTT [JITTER_MS]" of deploy/wan/profiles.
struct WanProfile {
  std::string name;
  double bandwidth_bytes_per_s = 0;  // link rate each way
  double rtt_ms = 0;
  double loss = 0;                   // packet loss probability in [0, 1)
};

// A tc rate ("1gbit", "100mbit", "20mbit", "500kbit", "10mbps" = bytes) in bytes/s.
absl::StatusOr<double> parse_tc_rate(const std::string& text) {
  struct Unit {
    const char* suffix;
    double bytes_per_s;
  };
  // Longest suffixes first so "mbps" is not read as "bps".
  static constexpr Unit kUnits[] = {{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"gbps", 1e9},
                                    {"mbps", 1e6},     {"kbps", 1e3},     {"bit", 1.0 / 8},  {"bps", 1.0}};
  for (const Unit& unit : kUnits) {
    const std::string suffix = unit.suffix;
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      double value = 0;
      if (!absl::SimpleAtod(text.substr(0, text.size() - suffix.size()), &value) || value <= 0) break;
      return value * unit.bytes_per_s;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rate '", text, "' is not a positive tc rate (e.g. 1gbit, 100mbit, 20mbit, 10mbps)"));
}

// The profiles file next to the working directory, else next to the binary
// (build*/bin/baton -> ../../deploy/wan/profiles).
std::string default_profiles_path() {
  const std::string relative = "deploy/wan/profiles";
  if (std::ifstream(relative).good()) return relative;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    for (int up = 0; up < 3 && dir.find('/') != std::string::npos; ++up) dir = dir.substr(0, dir.rfind('/'));
    if (std::ifstream(dir + "/" + relative).good()) return dir + "/" + relative;
  }
  return relative;
}

absl::StatusOr<std::vector<WanProfile>> read_profiles(const std::string& path, const std::vector<std::string>& names,
                                                      double loss) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the WAN profiles file ", path));
  std::vector<WanProfile> all;
  for (std::string line; std::getline(in, line);) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const std::vector<std::string> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.empty()) continue;
    if (words.size() < 3) return absl::InvalidArgumentError(absl::StrCat(path, ": '", line, "' needs NAME RATE RTT"));
    WanProfile profile;
    profile.name = words[0];
    BATON_ASSIGN_OR_RETURN(profile.bandwidth_bytes_per_s, parse_tc_rate(words[1]));
    if (!absl::SimpleAtod(words[2], &profile.rtt_ms) || profile.rtt_ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": RTT '", words[2], "' of ", words[0], " is not >= 0 ms"));
    }
    profile.loss = loss;
    all.push_back(profile);
  }
  std::vector<WanProfile> chosen;
  for (const std::string& name : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const WanProfile& p) { return p.name == name; });
    if (it == all.end()) return absl::NotFoundError(absl::StrCat("no WAN profile '", name, "' in ", path));
    chosen.push_back(*it);
  }
  return chosen;
}

// Deterministic pseudo-random prompt tokens (no tokenizer needed); each prompt
// length gets its own seed so nothing is shared between runs.
std::vector<int32_t> synthetic_prompt(int64_t n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n_vocab));
  return tokens;
}

// What one prompt length measured (all times in ms, on this machine).
struct LengthResult {
  int64_t prompt_len = 0;
  // Local: prefill of [0, n-1) into the edge store, then the last prompt
  // token (one decode step) and the first sample.
  double local_prefill_ms = 0;
  double local_last_token_ms = 0;
  double local_ttft_ms = 0;
  // Split over loopback.
  double cloud_ms = 0;            // trailer ProducerStats: queue + prefill + encode tail
  double cloud_prefill_ms = 0;    // ProducerStats.prefill_ms alone
  double first_block_ms = 0;      // call start -> first KvBlock
  double receive_ms = 0;          // call start -> last message
  double ingest_ms = 0;           // last message -> segment committed (verify, decode, commit)
  double split_last_token_ms = 0; // the edge's last prompt token + first sample
  double loopback_split_ttft_ms = 0;  // measured end to end over loopback (no WAN)
  uint64_t wire_bytes = 0;        // KV payload bytes received (after zstd)
  uint64_t quantized_bytes = 0;   // payload bytes before zstd
  // Decode over the ingested KV.
  double decode_mean_tok_s = 0;   // tokens / their total time
  double decode_p99_ms = 0;       // 99th percentile step time
  double decode_p99_tok_s = 0;    // 1000 / decode_p99_ms
  bool first_tokens_match = false;  // the split's first token equals the local one (greedy)
};

// The modeled time to first token of the split over `profile` for a length
// whose cloud work takes `cloud_ms` and whose first block arrives after
// `first_block_ms` (loopback) of it.
double modeled_split_ttft_ms(const LengthResult& r, const WanProfile& profile, double cloud_ms, double first_block_ms) {
  const double transfer_ms =
      static_cast<double>(r.wire_bytes) / (profile.bandwidth_bytes_per_s * (1.0 - profile.loss)) * 1000.0;
  return profile.rtt_ms + std::max(cloud_ms, first_block_ms + transfer_ms) + r.ingest_ms + r.split_last_token_ms;
}

// Projected GPU cloud work for a length: prompt tokens / GPU tok/s; the first
// block comes after the same fraction of it as measured on the CPU cloud.
void projected_cloud(const LengthResult& r, double gpu_tok_s, double* cloud_ms, double* first_block_ms) {
  *cloud_ms = static_cast<double>(r.prompt_len - 1) / gpu_tok_s * 1000.0;
  const double fraction = r.cloud_ms > 0 ? std::min(1.0, r.first_block_ms / r.cloud_ms) : 1.0;
  *first_block_ms = *cloud_ms * fraction;
}

double percentile(std::vector<double> values, double p) {
  BATON_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

// Each time the median over `runs` of the same length (independently per
// field); byte counts are the same in every run.
LengthResult median_of(const std::vector<LengthResult>& runs) {
  BATON_CHECK(!runs.empty());
  LengthResult out = runs[0];
  auto median_field = [&](double LengthResult::*field) {
    std::vector<double> values;
    for (const LengthResult& r : runs) values.push_back(r.*field);
    out.*field = percentile(values, 0.5);
  };
  for (double LengthResult::*field :
       {&LengthResult::local_prefill_ms, &LengthResult::local_last_token_ms, &LengthResult::local_ttft_ms,
        &LengthResult::cloud_ms, &LengthResult::cloud_prefill_ms, &LengthResult::first_block_ms,
        &LengthResult::receive_ms, &LengthResult::ingest_ms, &LengthResult::split_last_token_ms,
        &LengthResult::loopback_split_ttft_ms, &LengthResult::decode_mean_tok_s, &LengthResult::decode_p99_ms}) {
    median_field(field);
  }
  out.decode_p99_tok_s = 1000.0 / out.decode_p99_ms;
  for (const LengthResult& r : runs) out.first_tokens_match = out.first_tokens_match && r.first_tokens_match;
  return out;
}

// Greedy pick of the next token.
int32_t first_token(Sampler& sampler, const std::vector<float>& logits) { return sampler.sample(logits); }

// Everything the measurement needs, set up once.
struct Bench {
  Engine* engine = nullptr;
  const Model* edge_model = nullptr;
  ModelFingerprint edge_fingerprint;
  KvRope rope;
  KvCodecConfig wire;
  KvCodecConfig store;
  v1::Prefill::Stub* stub = nullptr;
  int64_t chunk_tokens = 256;
  int64_t decode_tokens = 32;
};

// Streams the KV of `tokens` from the cloud into `target` and times it.
absl::Status cloud_prefill(const Bench& bench, const std::vector<int32_t>& tokens, KvCache& target,
                           LengthResult& r) {
  v1::PrefillRequest request;
  for (int32_t t : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(t));
  *request.mutable_expected_model() = model_fingerprint_to_proto(bench.edge_fingerprint);
  BATON_ASSIGN_OR_RETURN(*request.mutable_codec(), kv_codec_params(bench.wire));
  request.set_first_position(0);
  request.set_chunk_tokens(static_cast<uint32_t>(bench.chunk_tokens));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
  const Clock::time_point start = Clock::now();
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = bench.stub->Prefill(&context, request);
  Clock::time_point first_block{}, last_message = start;
  bool finished = false, have_block = false;
  v1::ProducerStats producer;
  KvMessageSource source = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (finished) return std::optional<v1::KvStreamMessage>();
    v1::KvStreamMessage message;
    if (!reader->Read(&message)) {
      finished = true;
      last_message = Clock::now();
      grpc::Status status = reader->Finish();
      if (!status.ok()) return absl::UnavailableError(absl::StrCat("cloud: ", status.error_message()));
      return std::optional<v1::KvStreamMessage>();
    }
    last_message = Clock::now();
    if (message.has_block()) {
      if (!have_block) first_block = last_message;
      have_block = true;
      r.wire_bytes += message.block().payload().size();
      r.quantized_bytes += message.block().raw_size();
    } else if (message.has_trailer()) {
      producer = message.trailer().producer();
    }
    return std::optional<v1::KvStreamMessage>(std::move(message));
  };
  KvStreamExpectation expected;
  expected.model = bench.edge_fingerprint;
  expected.first_position = 0;
  expected.token_ids = tokens;
  absl::StatusOr<KvSegmentLoad> load = read_kv_segment(source, expected, &bench.rope, target);
  if (!finished) {
    context.TryCancel();
    v1::KvStreamMessage ignored;
    while (reader->Read(&ignored)) {
    }
    (void)reader->Finish();
  }
  if (!load.ok()) return load.status();
  const Clock::time_point end = Clock::now();
  r.first_block_ms = have_block ? ms_between(start, first_block) : ms_between(start, last_message);
  r.receive_ms = ms_between(start, last_message);
  r.ingest_ms = ms_between(last_message, end);
  r.cloud_prefill_ms = producer.prefill_ms();
  r.cloud_ms = producer.queue_ms() + producer.prefill_ms() + producer.encode_ms();
  if (r.cloud_ms <= 0) r.cloud_ms = r.receive_ms;  // no producer stats: the whole receive
  return absl::OkStatus();
}

absl::StatusOr<LengthResult> measure_length(const Bench& bench, int64_t n) {
  LengthResult r;
  r.prompt_len = n;
  Engine& engine = *bench.engine;
  const KvGeometry geometry = engine.kv_geometry();
  const std::vector<int32_t> prompt =
      synthetic_prompt(n, bench.edge_model->spec().n_vocab, 1000 + static_cast<uint64_t>(n));
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);  // [0, n-1)
  const int64_t capacity = n + bench.decode_tokens + 1;
  std::vector<float> logits;  // [n_vocab]

  // Local: the edge prefills everything itself.
  int32_t local_first = -1;
  {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv, QuantizedKvCache::Create(geometry, capacity, bench.store));
    Sampler sampler(SamplingParams{});
    const Clock::time_point start = Clock::now();
    BATON_RETURN_IF_ERROR(engine.prefill(head, *kv, nullptr));
    const Clock::time_point prefilled = Clock::now();
    BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
    local_first = first_token(sampler, logits);
    const Clock::time_point end = Clock::now();
    r.local_prefill_ms = ms_between(start, prefilled);
    r.local_last_token_ms = ms_between(prefilled, end);
    r.local_ttft_ms = ms_between(start, end);
  }

  // Split: the cloud prefills [0, n-1), the edge ingests it and runs token n-1.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv, QuantizedKvCache::Create(geometry, capacity, bench.store));
  Sampler sampler(SamplingParams{});
  const Clock::time_point start = Clock::now();
  BATON_RETURN_IF_ERROR(cloud_prefill(bench, head, *kv, r));
  const Clock::time_point ingested = Clock::now();
  BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
  int32_t token = first_token(sampler, logits);
  const Clock::time_point end = Clock::now();
  r.split_last_token_ms = ms_between(ingested, end);
  r.loopback_split_ttft_ms = ms_between(start, end);
  r.first_tokens_match = token == local_first;

  // Decode over the ingested KV, greedy, one timed step per token.
  std::vector<double> step_ms;
  for (int64_t i = 0; i < bench.decode_tokens; ++i) {
    const Clock::time_point step_start = Clock::now();
    BATON_RETURN_IF_ERROR(engine.decode_step(token, *kv, &logits));
    token = sampler.sample(logits);
    step_ms.push_back(ms_between(step_start, Clock::now()));
  }
  double total_ms = 0;
  for (double ms : step_ms) total_ms += ms;
  r.decode_mean_tok_s = static_cast<double>(step_ms.size()) * 1000.0 / total_ms;
  r.decode_p99_ms = percentile(step_ms, 0.99);
  r.decode_p99_tok_s = 1000.0 / r.decode_p99_ms;
  return r;
}

// The GPU prefill speed in a device check's bench.jsonl (rows of `baton bench
// prefill-cuda --json`): the row of `shape` (else any row) whose token count
// is nearest `tokens`; 0 when there is none.
double gpu_tok_s_from_report(const std::string& path, const std::string& shape, int64_t tokens) {
  std::ifstream in(path);
  auto field = [](const std::string& line, const std::string& key) -> std::string {
    const std::string pattern = "\"" + key + "\":";
    size_t at = line.find(pattern);
    if (at == std::string::npos) return "";
    at += pattern.size();
    while (at < line.size() && line[at] == ' ') ++at;
    if (at < line.size() && line[at] == '"') return line.substr(at + 1, line.find('"', at + 1) - at - 1);
    return line.substr(at, line.find_first_of(",}", at) - at);
  };
  double best = 0, best_distance = 0;
  bool best_shape = false;
  for (std::string line; std::getline(in, line);) {
    double tok_s = 0, row_tokens = 0;
    if (!absl::SimpleAtod(field(line, "prefill_tok_per_s"), &tok_s) || tok_s <= 0) continue;
    if (!absl::SimpleAtod(field(line, "tokens"), &row_tokens)) continue;
    const bool same_shape = field(line, "shape") == shape;
    const double distance = std::fabs(std::log(row_tokens / static_cast<double>(tokens)));
    if (best == 0 || (same_shape && !best_shape) || (same_shape == best_shape && distance < best_distance)) {
      best = tok_s, best_distance = distance, best_shape = same_shape;
    }
  }
  return best;
}

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

// Writes TTFT vs prompt length (local vs split per profile, projection dashed)
// as a PNG with gnuplot.
absl::Status write_plot(const std::string& png, const std::string& title, const std::vector<LengthResult>& results,
                        const std::vector<WanProfile>& profiles, const std::vector<double>& gpu_tok_s,
                        const std::string& gpu_label) {
  char dir_template[] = "/tmp/baton-bench-split-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = dir_template;
  std::ofstream data(dir + "/ttft.dat");
  BATON_CHECK(gpu_tok_s.size() == results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const LengthResult& r = results[i];
    data << r.prompt_len << ' ' << r.local_ttft_ms;
    for (const WanProfile& p : profiles) data << ' ' << modeled_split_ttft_ms(r, p, r.cloud_ms, r.first_block_ms);
    for (const WanProfile& p : profiles) {
      double cloud_ms = 0, first_block_ms = 0;
      projected_cloud(r, gpu_tok_s[i], &cloud_ms, &first_block_ms);
      data << ' ' << modeled_split_ttft_ms(r, p, cloud_ms, first_block_ms);
    }
    data << '\n';
  }
  data.close();
  std::ofstream script(dir + "/plot.gp");
  script << "set terminal pngcairo size 1000,750 noenhanced\n"
         << "set output '" << png << "'\n"
         << "set title '" << title << "'\n"
         << "set xlabel 'prompt tokens'\nset ylabel 'time to first token (ms)'\n"
         << "set logscale x 2\nset logscale y\nset grid\nset key below\n"
         << "plot '" << dir << "/ttft.dat' using 1:2 with linespoints lw 2 lc rgb 'black' title 'local (edge prefill)'";
  const char* colors[] = {"#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e"};
  const size_t k = profiles.size();
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + i << " with linespoints lw 2 lc rgb '" << colors[i % 5] << "' title 'split "
           << profiles[i].name << " (CPU cloud)'";
  }
  for (size_t i = 0; i < k; ++i) {
    script << ", '' using 1:" << 3 + k + i << " with lines dt 2 lw 2 lc rgb '" << colors[i % 5]
           << "' title 'PROJECTION split " << profiles[i].name << " (" << gpu_label << ")'";
  }
  script << "\n";
  script.close();
  const std::string command = "gnuplot '" + dir + "/plot.gp' 2>&1";
  const int rc = std::system(command.c_str());
  std::remove((dir + "/ttft.dat").c_str());
  std::remove((dir + "/plot.gp").c_str());
  rmdir(dir.c_str());
  if (rc != 0) return absl::InternalError(absl::StrFormat("gnuplot failed (exit %d) writing %s", rc, png));
  return absl::OkStatus();
}

}  // namespace

int bench_split(const Args& args) {
  std::string model_path, cloud_model_path, lengths_text, profile_names = "fiber,wifi,4g", profiles_path;
  std::string codec_pattern = "int8-gG-z3", plot_path, device_report;
  int64_t threads = 2, decode_tokens = 32, max_len = 0, chunk_tokens = 256, repeat = 1;
  double gpu_tok_s = 0, loss_pct = 0;
  bool json = false;
  FlagSet flags("baton bench split",
                "--model EDGE_Q4_0 [--cloud-model FILE] [--prompt-lens 128,256,...] [--profiles fiber,wifi,4g] "
                "[--codec C] [--gpu-prefill-tok-s N | --device-report bench.jsonl] [--plot F.png] [--json]",
                "When does the split pay: per prompt length, time to first token local-only (the edge's own "
                "prefill) vs split (a real baton-prefill on loopback, CPU backend, streaming the KV through "
                "read_kv_segment into the edge store), bytes on the wire and decode tok/s, all measured here; "
                "the WAN is modeled per profile from deploy/wan/profiles (transfer = wire bytes / (rate x (1 - "
                "loss)); split TTFT = RTT + max(cloud, first block + transfer) + ingest + last token), not "
                "emulated. PROJECTION rows replace the CPU cloud by a GPU prefill speed.");
  flags.add_string("model", &model_path, "the edge's GGUF model (Q4_0)", "FILE");
  flags.add_string("cloud-model", &cloud_model_path, "the cloud's GGUF model (default: --model)", "FILE");
  flags.add_string("prompt-lens", &lengths_text, "comma-separated prompt lengths (default 128, 256, ... up to the "
                   "model's n_ctx_train or --max-len)", "LIST");
  flags.add_int64("max-len", &max_len, "longest default prompt length (0: the model's n_ctx_train)");
  flags.add_string("profiles", &profile_names, "WAN profiles to model (names in the profiles file)", "LIST");
  flags.add_string("profiles-file", &profiles_path, "WAN profiles file (default deploy/wan/profiles)", "FILE");
  flags.add_double("loss", &loss_pct, "packet loss percent applied to every profile (as wan-up.sh --loss)");
  flags.add_string("codec", &codec_pattern, "wire codec; G stands for min(32, head_dim)", "NAME");
  flags.add_int64("threads", &threads, "CPU threads of the edge engine and of the cloud backend");
  flags.add_int64("decode-tokens", &decode_tokens, "tokens decoded and timed per length");
  flags.add_int64("repeat", &repeat, "measurements per length; each time is the median over them (a busy machine)");
  flags.add_int64("chunk-tokens", &chunk_tokens, "the cloud's tokens per prefill chunk / stream slice");
  flags.add_double("gpu-prefill-tok-s", &gpu_tok_s, "GPU prefill tok/s for the PROJECTION rows");
  flags.add_string("device-report", &device_report, "bench.jsonl of a CUDA device check: GPU prefill tok/s for "
                   "the PROJECTION rows", "FILE");
  flags.add_string("plot", &plot_path, "write TTFT vs prompt length as a PNG (gnuplot)", "FILE.png");
  flags.add_bool("json", &json, "print one JSON object instead of the tables");
  flags.require("model");
  if (auto code = bench_parse_flags(flags, args)) return *code;
  if (threads < 1 || decode_tokens < 1 || chunk_tokens < 1 || repeat < 1) {
    return bench_fail("--threads, --decode-tokens, --chunk-tokens and --repeat must be >= 1");
  }
  if (loss_pct < 0 || loss_pct >= 100) return bench_fail(absl::StrFormat("--loss %g is not in [0, 100)", loss_pct));
  if (cloud_model_path.empty()) cloud_model_path = model_path;

  auto edge_model = Model::Load(model_path);
  if (!edge_model.ok()) return bench_fail(std::string(edge_model.status().message()));
  const ModelSpec& spec = (*edge_model)->spec();
  const int64_t limit = max_len > 0 ? max_len : (spec.n_ctx_train > 0 ? spec.n_ctx_train : 2048);
  std::vector<int64_t> lengths;
  if (lengths_text.empty()) {
    for (int64_t n = 128; n <= limit; n *= 2) lengths.push_back(n);
  } else {
    for (const std::string& item : std::vector<std::string>(absl::StrSplit(lengths_text, ',', absl::SkipEmpty()))) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(item, &n) || n < 2) return bench_fail("--prompt-lens: '" + item + "' is not a length >= 2");
      lengths.push_back(n);
    }
    std::sort(lengths.begin(), lengths.end());
  }
  if (lengths.empty()) return bench_fail(absl::StrFormat("no prompt length from 128 fits the limit of %d tokens", limit));

  if (profiles_path.empty()) profiles_path = default_profiles_path();
  auto profiles = read_profiles(profiles_path, absl::StrSplit(profile_names, ',', absl::SkipEmpty()), loss_pct / 100);
  if (!profiles.ok()) return bench_fail(std::string(profiles.status().message()));

  auto wire = parse_kv_codec_config(expand_codec_list(codec_pattern, spec.head_dim));
  if (!wire.ok()) return bench_fail(std::string(wire.status().message()));
  Engine engine(**edge_model, EngineOptions{static_cast<int>(threads), 64});
  if (absl::Status st = wire->validate(engine.kv_geometry()); !st.ok()) return bench_fail(std::string(st.message()));
  auto fingerprint = model_fingerprint(**edge_model);
  if (!fingerprint.ok()) return bench_fail(std::string(fingerprint.status().message()));

  // The GPU prefill speed of the projection and where it came from.
  std::string gpu_source;
  auto gpu_tok_s_for = [&](int64_t tokens) -> double {
    if (gpu_tok_s > 0) return gpu_tok_s;
    if (!device_report.empty()) return gpu_tok_s_from_report(device_report, spec.name, tokens);
    return 0;
  };
  // Matmul parameters per token (layer matrices and the output projection):
  // the assumption's FLOPs per token are 2 x params (attention left out).
  double params = 0;
  for (int i = 0; i < spec.n_layer; ++i) {
    const LayerWeights& l = (*edge_model)->layer(i);
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      params += static_cast<double>(w->rows) * static_cast<double>(w->cols);
    }
  }
  params += static_cast<double>((*edge_model)->output().rows) * static_cast<double>((*edge_model)->output().cols);
  const double assumed_gpu_tok_s = 0.4 * 989e12 / (2.0 * params);
  if (gpu_tok_s > 0) {
    gpu_source = "--gpu-prefill-tok-s";
  } else if (!device_report.empty()) {
    if (gpu_tok_s_for(lengths.back()) <= 0) return bench_fail("--device-report " + device_report + ": no prefill_tok_per_s rows");
    gpu_source = "device check " + device_report;
  } else {
    gpu_source =
        "ASSUMED (no device report): H200 at 40% of 989 TFLOP/s, 2 x params FLOP/token; compute-bound, so "
        "optimistic for small models and short prompts, which are launch-latency-bound on a GPU";
  }

  // The cloud: a real service and server on loopback, no caches (each
  // request computes everything).
  PrefillServiceOptions options;
  options.threads = static_cast<int>(threads);
  options.max_running = 1;
  options.chunk_tokens = static_cast<int>(chunk_tokens);
  options.max_context_tokens = lengths.back();
  options.prefix_cache_bytes = 0;
  options.session_cache_bytes = 0;
  PrefillService service(options);
  auto server = PrefillServer::Start("127.0.0.1:0", service);
  if (!server.ok()) return bench_fail(std::string(server.status().message()));
  if (absl::Status st = service.Load(cloud_model_path); !st.ok()) return bench_fail("cloud: " + std::string(st.message()));
  auto stub = v1::Prefill::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                                       grpc::InsecureChannelCredentials()));

  Bench bench;
  bench.engine = &engine;
  bench.edge_model = edge_model->get();
  bench.edge_fingerprint = *fingerprint;
  bench.rope = kv_rope_of(**edge_model);
  bench.wire = *wire;
  bench.store = QuantizedKvCache::store_config_for(*wire);
  bench.stub = stub.get();
  bench.chunk_tokens = chunk_tokens;
  bench.decode_tokens = decode_tokens;

  // Warm-up: page the edge weights in and open the channel (untimed).
  {
    LengthResult ignored;
    auto kv = QuantizedKvCache::Create(engine.kv_geometry(), 16, bench.store);
    if (!kv.ok()) return bench_fail(std::string(kv.status().message()));
    const std::vector<int32_t> warm = synthetic_prompt(8, spec.n_vocab, 1);
    if (absl::Status st = cloud_prefill(bench, warm, **kv, ignored); !st.ok()) {
      return bench_fail("warm-up cloud prefill: " + std::string(st.message()));
    }
    std::vector<float> logits;
    if (absl::Status st = engine.decode_step(warm[0], **kv, &logits); !st.ok()) return bench_fail(std::string(st.message()));
  }

  std::vector<LengthResult> results;
  for (int64_t n : lengths) {
    if (!json) std::fprintf(stderr, "baton bench split: prompt %lld tokens ...\n", static_cast<long long>(n));
    std::vector<LengthResult> runs;
    for (int64_t i = 0; i < repeat; ++i) {
      auto r = measure_length(bench, n);
      if (!r.ok()) return bench_fail(absl::StrFormat("prompt %d: %s", n, r.status().message()));
      runs.push_back(*r);
    }
    results.push_back(median_of(runs));
  }
  (*server)->Shutdown();
  const std::string backend_threads = absl::StrFormat("%d threads", threads);
  const double store_bytes_per_token =
      static_cast<double>(QuantizedKvCache::bytes_per_token(bench.store, engine.kv_geometry()));
  const char* link_note =
      "WAN modeled, not emulated (this machine's kernel has no netem): transfer = wire bytes / (rate x (1 - loss)), "
      "a crude TCP loss penalty; split TTFT = RTT + max(cloud, first block + transfer) + ingest + last token; "
      "cloud = trailer ProducerStats queue + prefill + encode tail (CPU backend on this machine: the same cores "
      "and CPU engine as the edge, so the CPU rows show the split's overheads, not a faster cloud)";
  const char* projection_note =
      "PROJECTION: the same formula with cloud = (prompt - 1) / GPU prefill tok/s, first block at the same "
      "fraction of it as measured on the CPU cloud";

  // Per profile: rows and crossovers.
  struct ProfileRows {
    std::vector<double> split_ms, projection_ms;
    std::vector<bool> split_wins, projection_wins;
  };
  std::vector<ProfileRows> per_profile(profiles->size());
  std::vector<double> gpu_rates;
  for (const LengthResult& r : results) gpu_rates.push_back(gpu_tok_s_for(r.prompt_len) > 0 ? gpu_tok_s_for(r.prompt_len) : assumed_gpu_tok_s);
  for (size_t p = 0; p < profiles->size(); ++p) {
    for (size_t i = 0; i < results.size(); ++i) {
      const LengthResult& r = results[i];
      const double split = modeled_split_ttft_ms(r, (*profiles)[p], r.cloud_ms, r.first_block_ms);
      double cloud_ms = 0, first_block_ms = 0;
      projected_cloud(r, gpu_rates[i], &cloud_ms, &first_block_ms);
      const double projection = modeled_split_ttft_ms(r, (*profiles)[p], cloud_ms, first_block_ms);
      per_profile[p].split_ms.push_back(split);
      per_profile[p].projection_ms.push_back(projection);
      per_profile[p].split_wins.push_back(split < r.local_ttft_ms);
      per_profile[p].projection_wins.push_back(projection < r.local_ttft_ms);
    }
  }

  if (json) {
    std::string out = absl::StrFormat(
        "{\"model\": \"%s\", \"edge_model\": \"%s\", \"cloud_model\": \"%s\", \"codec\": \"%s\", \"store\": \"%s\", "
        "\"store_bytes_per_token\": %.0f, \"threads\": %d, \"decode_tokens\": %d, \"repeat\": %d, \"cloud_backend\": \"cpu\", "
        "\"link_model\": \"%s\", \"projection_note\": \"%s\", \"gpu_prefill_source\": \"%s\", \"lengths\": [",
        json_escape(spec.name), json_escape(model_path), json_escape(cloud_model_path), json_escape(wire->to_string()),
        json_escape(bench.store.to_string()), store_bytes_per_token, threads, decode_tokens, repeat, json_escape(link_note),
        json_escape(projection_note), json_escape(gpu_source));
    for (size_t i = 0; i < results.size(); ++i) {
      const LengthResult& r = results[i];
      out += absl::StrFormat(
          "%s{\"prompt_len\": %d, \"local_prefill_ms\": %.3f, \"local_last_token_ms\": %.3f, \"local_ttft_ms\": %.3f, "
          "\"cloud_ms\": %.3f, \"cloud_prefill_ms\": %.3f, \"first_block_ms\": %.3f, \"receive_ms\": %.3f, "
          "\"ingest_ms\": %.3f, \"split_last_token_ms\": %.3f, \"loopback_split_ttft_ms\": %.3f, \"wire_bytes\": %d, "
          "\"quantized_bytes\": %d, \"decode_tok_per_s_mean\": %.3f, \"decode_p99_ms\": %.3f, "
          "\"decode_tok_per_s_p99\": %.3f, \"first_tokens_match\": %s, \"projection_gpu_prefill_tok_per_s\": %.1f}",
          i > 0 ? ", " : "", r.prompt_len, r.local_prefill_ms, r.local_last_token_ms, r.local_ttft_ms, r.cloud_ms,
          r.cloud_prefill_ms, r.first_block_ms, r.receive_ms, r.ingest_ms, r.split_last_token_ms,
          r.loopback_split_ttft_ms, r.wire_bytes, r.quantized_bytes, r.decode_mean_tok_s, r.decode_p99_ms,
          r.decode_p99_tok_s, r.first_tokens_match ? "true" : "false", gpu_rates[i]);
    }
    out += "], \"profiles\": [";
    for (size_t p = 0; p < profiles->size(); ++p) {
      const WanProfile& profile = (*profiles)[p];
      out += absl::StrFormat("%s{\"name\": \"%s\", \"bandwidth_bytes_per_s\": %.0f, \"rtt_ms\": %.3f, \"loss\": %.4f, "
                             "\"rows\": [",
                             p > 0 ? ", " : "", json_escape(profile.name), profile.bandwidth_bytes_per_s,
                             profile.rtt_ms, profile.loss);
      for (size_t i = 0; i < results.size(); ++i) {
        const LengthResult& r = results[i];
        out += absl::StrFormat(
            "%s{\"prompt_len\": %d, \"local_ttft_ms\": %.3f, \"split_ttft_ms\": %.3f, \"wire_bytes\": %d, "
            "\"decode_tok_per_s_mean\": %.3f, \"decode_tok_per_s_p99\": %.3f, \"winner\": \"%s\", "
            "\"projection_split_ttft_ms\": %.3f, \"projection_winner\": \"%s\"}",
            i > 0 ? ", " : "", r.prompt_len, r.local_ttft_ms, per_profile[p].split_ms[i], r.wire_bytes,
            r.decode_mean_tok_s, r.decode_p99_tok_s, per_profile[p].split_wins[i] ? "split" : "local",
            per_profile[p].projection_ms[i], per_profile[p].projection_wins[i] ? "split" : "local");
      }
      out += absl::StrFormat("], \"crossover\": \"%s\", \"projection_crossover\": \"%s\"}",
                             json_escape(crossover(lengths, per_profile[p].split_wins)),
                             json_escape(crossover(lengths, per_profile[p].projection_wins)));
    }
    out += "]";
    if (!plot_path.empty()) out += absl::StrFormat(", \"plot\": \"%s\"", json_escape(plot_path));
    out += "}\n";
    std::fputs(out.c_str(), stdout);
  } else {
    std::printf("split benchmark: %s (edge %s, cloud %s), codec %s -> store %s (%.0f B/token), %s, CPU cloud on "
                "loopback, %d decode tokens, median of %d runs per length\n",
                spec.name.c_str(), model_path.c_str(), cloud_model_path.c_str(), wire->to_string().c_str(),
                bench.store.to_string().c_str(), store_bytes_per_token, backend_threads.c_str(),
                static_cast<int>(decode_tokens), static_cast<int>(repeat));
    std::printf("\nmeasured on this machine (ms; cloud = queue + prefill + encode tail from the trailer):\n");
    std::printf("  %7s %10s %8s %10s %10s %10s %8s %8s %12s %11s %9s %9s %5s\n", "prompt", "local pre", "local/s",
                "local TTFT", "cloud", "1st block", "ingest", "last tok", "loopback TTFT", "wire bytes", "dec tok/s",
                "dec p99", "same");
    for (const LengthResult& r : results) {
      std::printf("  %7lld %10.1f %8.1f %10.1f %10.1f %10.1f %8.2f %8.2f %12.1f %11llu %9.2f %9.2f %5s\n",
                  static_cast<long long>(r.prompt_len), r.local_prefill_ms,
                  static_cast<double>(r.prompt_len - 1) * 1000.0 / r.local_prefill_ms, r.local_ttft_ms, r.cloud_ms,
                  r.first_block_ms, r.ingest_ms, r.split_last_token_ms, r.loopback_split_ttft_ms,
                  static_cast<unsigned long long>(r.wire_bytes), r.decode_mean_tok_s, r.decode_p99_tok_s,
                  r.first_tokens_match ? "yes" : "no");
    }
    std::printf("  (local/s = prefill tok/s; dec tok/s = mean over the decode tokens, dec p99 = 1 / p99 step time; "
                "same = split's first token equals local's, greedy)\n");
    std::printf("\n%s\n%s; GPU prefill tok/s: %s\n", link_note, projection_note, gpu_source.c_str());
    for (size_t p = 0; p < profiles->size(); ++p) {
      const WanProfile& profile = (*profiles)[p];
      std::printf("\nprofile %s: %.1f Mbit/s, RTT %.0f ms, loss %.2f%%\n", profile.name.c_str(),
                  profile.bandwidth_bytes_per_s * 8 / 1e6, profile.rtt_ms, profile.loss * 100);
      std::printf("  %7s %11s %11s %11s %10s %9s %7s | %15s %10s %9s\n", "prompt", "local TTFT", "split TTFT",
                  "wire bytes", "dec tok/s", "dec p99", "winner", "PROJ split TTFT", "PROJ win", "GPU tok/s");
      for (size_t i = 0; i < results.size(); ++i) {
        const LengthResult& r = results[i];
        std::printf("  %7lld %11.1f %11.1f %11llu %10.2f %9.2f %7s | %15.1f %10s %9.0f\n",
                    static_cast<long long>(r.prompt_len), r.local_ttft_ms, per_profile[p].split_ms[i],
                    static_cast<unsigned long long>(r.wire_bytes), r.decode_mean_tok_s, r.decode_p99_tok_s,
                    per_profile[p].split_wins[i] ? "split" : "local", per_profile[p].projection_ms[i],
                    per_profile[p].projection_wins[i] ? "split" : "local", gpu_rates[i]);
      }
      std::printf("  crossover (CPU cloud): %s\n", crossover(lengths, per_profile[p].split_wins).c_str());
      std::printf("  crossover (PROJECTION, GPU cloud): %s\n",
                  crossover(lengths, per_profile[p].projection_wins).c_str());
    }
  }

  if (!plot_path.empty()) {
    const std::string title = absl::StrFormat("baton bench split: %s, codec %s, edge %s (PROJECTION dashed)",
                                              spec.name, wire->to_string(), backend_threads);
    const std::string gpu_label = gpu_source.rfind("ASSUMED", 0) == 0
                                      ? absl::StrFormat("ASSUMED GPU %.0f tok/s", gpu_rates.back())
                                      : absl::StrFormat("GPU %.0f tok/s", gpu_rates.back());
    if (absl::Status st = write_plot(plot_path, title, results, *profiles, gpu_rates, gpu_label); !st.ok()) {
      return bench_fail(std::string(st.message()));
    }
    if (!json) std::printf("\nplot: %s\n", plot_path.c_str());
  }
  return 0;
}

}  // namespace baton::cli
