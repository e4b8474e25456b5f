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
// Early tokens (--early-tokens K > 0, the baseline codec): a second real
// Prefill call asks the cloud to sample K greedy tokens after the prompt; the
// client takes the EarlyTokens messages out of the stream (read_kv_segment
// verifies the rest) and times the first from the call's start, as the
// first block is timed (first_early; over loopback the bytes ahead of it
// cost nothing; its cloud_ms is reported too). The cloud writes one message at a time and the
// early ones overtake only the queued blocks, not the bytes the transport
// already holds: up to gRPC's flow-control window, max(4 MiB, 2 x B x R/1000)
// with BDP probing. So, blocks produced evenly over [first block, cloud]:
//   ahead       = min(max(0, produced(first_early) - delivered(first_early)), window)
//   early TTFT  = R + first_early + ahead / (B * (1 - p))
//   decoded here = split TTFT (cloud = the early call's trailer, which waits
//                  for the K decode steps) + early_delta
// early_delta is measured on the edge: prefill of [last prompt token, early
// tokens] in one batch minus the one-token last step, on the same store.
// PROJECTION: first_early = prompt tokens / GPU tok/s + one GPU decode step
// (--gpu-decode-ms, or F16 weight bytes / 60% of the H200's 4.8 TB/s, printed
// as an assumption). Output: bench_split_report.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_split.h"
#include "common/engine/sampler.h"
#include "common/engine/sampling_proto.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_transform_codec.h"
#include "common/model/model_fingerprint.h"
#include "common/rpc/channel_options.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "edge_decode/link/transform_coders.h"
#include "edge_decode/plan/codec_choice.h"
#include "in_process_cloud.h"
#include "kv_codec_list.h"

namespace baton::cli {
namespace {

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
        &LengthResult::loopback_split_ttft_ms, &LengthResult::decode_mean_tok_s, &LengthResult::decode_p99_ms,
        &LengthResult::first_early_ms, &LengthResult::early_cloud_ms, &LengthResult::early_stream_cloud_ms,
        &LengthResult::early_delta_ms}) {
    median_field(field);
  }
  out.decode_p99_tok_s = 1000.0 / out.decode_p99_ms;
  for (const LengthResult& r : runs) {
    out.first_tokens_match = out.first_tokens_match && r.first_tokens_match;
    out.early_first_matches = out.early_first_matches && r.early_first_matches;
    out.early_received = std::min(out.early_received, r.early_received);  // the fewest any run got
  }
  return out;
}

// One wire codec of the run and the edge store it lands in.
struct CodecSetup {
  KvCodecConfig wire;   // bound to the calibration for a transform codec
  KvCodecConfig store;  // edge_store_config(wire)
  std::unique_ptr<KvTransformCodec> transform;  // the transform codec's coder; else null
};

// Everything the measurement needs, set up once.
struct SplitSetup {
  Engine* engine = nullptr;
  const Model* edge_model = nullptr;
  ModelFingerprint edge_fingerprint;
  KvRope rope;
  std::vector<CodecSetup> codecs;  // codecs[0]: the baseline, whose store the local rows use
  v1::Prefill::Stub* stub = nullptr;
  int64_t chunk_tokens = 256;
  int64_t decode_tokens = 32;
  int64_t early_tokens = 0;  // --early-tokens: asked for with codecs[0]; 0: none
};

// Times of one KV stream as the client reads it.
struct StreamClock {
  Clock::time_point start, first_block{}, last_message;
  bool finished = false, have_block = false;
  v1::ProducerStats producer;
};

// The early tokens of one stream as the client takes them out of it.
struct EarlyReceived {
  Clock::time_point call_start{}, first{};
  double first_cloud_ms = 0;  // the first message's cloud_ms
  std::vector<int32_t> tokens;
  int messages = 0;
  bool last_seen = false;
};

// Streams the KV of `tokens` from the cloud with `codec` into `target` and
// times it. With `early` (a request for early tokens), the EarlyTokens
// messages are taken out of the stream before read_kv_segment sees it (as
// the edge's cloud client does) into `received`.
absl::Status cloud_prefill(const SplitSetup& setup, const CodecSetup& codec, const std::vector<int32_t>& tokens,
                           KvCache& target, LengthResult& r, const v1::EarlyTokensRequest* early = nullptr,
                           EarlyReceived* received = nullptr) {
  BATON_CHECK((early == nullptr) == (received == nullptr));
  v1::PrefillRequest request;
  for (int32_t t : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(t));
  *request.mutable_expected_model() = model_fingerprint_to_proto(setup.edge_fingerprint);
  BATON_ASSIGN_OR_RETURN(*request.mutable_codec(), kv_codec_params(codec.wire));
  request.set_first_position(0);
  request.set_chunk_tokens(static_cast<uint32_t>(setup.chunk_tokens));
  if (early != nullptr) *request.mutable_early_tokens() = *early;
  const uint32_t early_wanted = early != nullptr ? early->count() : 0;
  grpc::ClientContext context;
  prepare_call(context, std::chrono::system_clock::now() + std::chrono::minutes(30), /*bearer_token=*/"");
  StreamClock clock;
  clock.start = clock.last_message = Clock::now();
  if (received != nullptr) received->call_start = clock.start;
  std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = setup.stub->Prefill(&context, request);
  auto take_early = [&](const v1::EarlyTokens& message) -> absl::Status {
    if (received == nullptr) return absl::DataLossError("the cloud sent early tokens; none were asked for");
    if (received->last_seen) {
      return absl::DataLossError(absl::StrFormat(
          "the cloud sent %d early tokens after the message marked last (%d tokens before; out of order?)",
          message.token_ids_size(), received->tokens.size()));
    }
    if (received->tokens.size() + static_cast<size_t>(message.token_ids_size()) > early_wanted) {
      return absl::DataLossError(absl::StrFormat("the cloud sent %d more early tokens after %d; %u were asked for",
                                                 message.token_ids_size(), received->tokens.size(), early_wanted));
    }
    if (received->messages++ == 0) {
      received->first = clock.last_message;
      received->first_cloud_ms = message.cloud_ms();
    }
    for (uint32_t id : message.token_ids()) received->tokens.push_back(static_cast<int32_t>(id));
    received->last_seen = message.last();
    return absl::OkStatus();
  };
  KvMessageSource source = [&]() -> absl::StatusOr<std::optional<v1::KvStreamMessage>> {
    if (clock.finished) return std::optional<v1::KvStreamMessage>();
    v1::KvStreamMessage message;
    bool read = reader->Read(&message);
    while (read && message.has_early_tokens()) {  // never handed to the reader
      clock.last_message = Clock::now();
      BATON_RETURN_IF_ERROR(take_early(message.early_tokens()));
      read = reader->Read(&message);
    }
    if (!read) {
      clock.finished = true;
      clock.last_message = Clock::now();
      grpc::Status status = reader->Finish();
      if (!status.ok()) return absl::UnavailableError(absl::StrCat("cloud: ", status.error_message()));
      return std::optional<v1::KvStreamMessage>();
    }
    clock.last_message = Clock::now();
    if (message.has_block()) {
      if (!clock.have_block) clock.first_block = clock.last_message;
      clock.have_block = true;
      r.wire_bytes += message.block().payload().size();
      r.quantized_bytes += message.block().raw_size();
    } else if (message.has_trailer()) {
      clock.producer = message.trailer().producer();
    }
    return std::optional<v1::KvStreamMessage>(std::move(message));
  };
  KvStreamExpectation expected;
  expected.model = setup.edge_fingerprint;
  expected.first_position = 0;
  expected.token_ids = tokens;
  KvReadOptions options;
  options.transform = codec.transform.get();
  absl::StatusOr<KvSegmentLoad> load = read_kv_segment(source, expected, &setup.rope, target, options);
  if (!clock.finished) {
    context.TryCancel();
    v1::KvStreamMessage ignored;
    while (reader->Read(&ignored)) {
    }
    (void)reader->Finish();
  }
  BATON_RETURN_IF_ERROR(load.status());
  const Clock::time_point end = Clock::now();
  r.first_block_ms = ms_between(clock.start, clock.have_block ? clock.first_block : clock.last_message);
  r.receive_ms = ms_between(clock.start, clock.last_message);
  r.ingest_ms = ms_between(clock.last_message, end);
  r.cloud_prefill_ms = clock.producer.prefill_ms();
  r.cloud_ms = clock.producer.queue_ms() + clock.producer.prefill_ms() + clock.producer.encode_ms();
  if (r.cloud_ms <= 0) r.cloud_ms = r.receive_ms;  // no producer stats: the whole receive
  if (received != nullptr && received->messages > 0) received->first_cloud_ms += clock.producer.queue_ms();
  return absl::OkStatus();
}

// Local: the edge prefills [0, n-1) itself, then runs token n-1; returns the
// first (greedy) token.
absl::StatusOr<int32_t> measure_local(const SplitSetup& setup, const std::vector<int32_t>& prompt,
                                      int64_t capacity, LengthResult& r) {
  Engine& engine = *setup.engine;
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                         QuantizedKvCache::Create(engine.kv_geometry(), capacity, setup.codecs[0].store));
  Sampler sampler(SamplingParams{});
  std::vector<float> logits;  // [n_vocab]
  const Clock::time_point start = Clock::now();
  BATON_RETURN_IF_ERROR(engine.prefill(head, *kv, nullptr));
  const Clock::time_point prefilled = Clock::now();
  BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
  const int32_t first = sampler.sample(logits);
  const Clock::time_point end = Clock::now();
  r.local_prefill_ms = ms_between(start, prefilled);
  r.local_last_token_ms = ms_between(prefilled, end);
  r.local_ttft_ms = ms_between(start, end);
  return first;
}

// Split with `codec`: the cloud prefills [0, n-1), the edge ingests it and
// runs token n-1 (its first token compared with the local one), then decodes
// over the ingested KV. Fills the split and decode fields of `r`.
absl::Status measure_split(const SplitSetup& setup, const CodecSetup& codec, const std::vector<int32_t>& prompt,
                           int64_t capacity, int32_t local_first, LengthResult& r) {
  Engine& engine = *setup.engine;
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);  // [0, n-1)
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                         QuantizedKvCache::Create(engine.kv_geometry(), capacity, codec.store));
  Sampler sampler(SamplingParams{});
  std::vector<float> logits;  // [n_vocab]
  const Clock::time_point start = Clock::now();
  BATON_RETURN_IF_ERROR(cloud_prefill(setup, codec, head, *kv, r));
  const Clock::time_point ingested = Clock::now();
  BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
  int32_t token = sampler.sample(logits);
  const Clock::time_point end = Clock::now();
  r.split_last_token_ms = ms_between(ingested, end);
  r.loopback_split_ttft_ms = ms_between(start, end);
  r.first_tokens_match = token == local_first;

  // Decode over the ingested KV, greedy, one timed step per token.
  std::vector<double> step_ms;
  for (int64_t i = 0; i < setup.decode_tokens; ++i) {
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
  return absl::OkStatus();
}

// Early tokens with `codec`: a second cloud call of [0, n-1) asks for
// setup.early_tokens greedy tokens after the prompt, times the first
// EarlyTokens message and verifies the KV stream around them; then on the
// ingested store the edge's extra local cost: the last prompt token with the
// early tokens in one prefill batch (as GenerateTurn::start_decoding does)
// against the one-token last step, both timed on the same store (the step
// first, then the store set back to n-1 tokens).
absl::Status measure_early(const SplitSetup& setup, const CodecSetup& codec, const std::vector<int32_t>& prompt,
                           int64_t capacity, int32_t local_first, LengthResult& r) {
  Engine& engine = *setup.engine;
  const std::vector<int32_t> head(prompt.begin(), prompt.end() - 1);  // [0, n-1)
  // Room for the prompt and the early tokens (the decode run's capacity may be less).
  const int64_t early_capacity = std::max<int64_t>(capacity, static_cast<int64_t>(prompt.size()) + setup.early_tokens);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> kv,
                         QuantizedKvCache::Create(engine.kv_geometry(), early_capacity, codec.store));
  Sampler sampler(SamplingParams{});  // greedy: temperature 0
  const v1::EarlyTokensRequest request =
      early_tokens_request(sampler, static_cast<uint32_t>(setup.early_tokens), prompt.back(), std::nullopt);
  LengthResult stream;  // the early call's own stream figures
  EarlyReceived received;
  BATON_RETURN_IF_ERROR(with_context("early tokens: ", cloud_prefill(setup, codec, head, *kv, stream, &request,
                                                                     &received)));
  if (received.tokens.empty()) return absl::DataLossError("early tokens: the cloud sent none");
  if (!received.last_seen) {
    return absl::DataLossError(absl::StrFormat("early tokens: %d of %d came, none marked last",
                                               received.tokens.size(), setup.early_tokens));
  }
  r.early_asked = setup.early_tokens;
  r.early_received = static_cast<int64_t>(received.tokens.size());
  r.first_early_ms = ms_between(received.call_start, received.first);
  r.early_cloud_ms = received.first_cloud_ms;
  r.early_stream_cloud_ms = stream.cloud_ms;
  r.early_first_matches = received.tokens[0] == local_first;

  std::vector<float> logits;  // [n_vocab]
  const Clock::time_point step_start = Clock::now();
  BATON_RETURN_IF_ERROR(engine.decode_step(prompt.back(), *kv, &logits));
  (void)sampler.sample(logits);
  const double step_ms = ms_between(step_start, Clock::now());
  kv->set_size(static_cast<int64_t>(head.size()));
  std::vector<int32_t> run(1, prompt.back());
  run.insert(run.end(), received.tokens.begin(), received.tokens.end());
  const Clock::time_point batch_start = Clock::now();
  BATON_RETURN_IF_ERROR(engine.prefill(run, *kv, &logits));
  (void)sampler.sample(logits);
  r.early_delta_ms = ms_between(batch_start, Clock::now()) - step_ms;
  return absl::OkStatus();
}

// One length: local once, then the split with every codec (per codec), and
// with early tokens asked for the baseline codec's early call.
absl::StatusOr<std::vector<LengthResult>> measure_length(const SplitSetup& setup, int64_t n) {
  LengthResult local;
  local.prompt_len = n;
  const std::vector<int32_t> prompt =
      synthetic_tokens(n, setup.edge_model->spec().n_vocab, 1000 + static_cast<uint64_t>(n));
  const int64_t capacity = n + setup.decode_tokens + 1;
  BATON_ASSIGN_OR_RETURN(const int32_t local_first, measure_local(setup, prompt, capacity, local));
  std::vector<LengthResult> out;
  for (const CodecSetup& codec : setup.codecs) {
    LengthResult r = local;
    BATON_RETURN_IF_ERROR(with_context(absl::StrCat(codec.wire.to_string(), ": "),
                                       measure_split(setup, codec, prompt, capacity, local_first, r)));
    if (setup.early_tokens > 0 && out.empty()) {
      BATON_RETURN_IF_ERROR(with_context(absl::StrCat(codec.wire.to_string(), ": "),
                                         measure_early(setup, codec, prompt, capacity, local_first, r)));
    }
    out.push_back(r);
  }
  return out;
}

// The GPU prefill speed in a device check's bench.jsonl (rows of `baton bench
// prefill-cuda --json`): the row of `shape` (else any row) whose token count
// is nearest `tokens`; 0 when there is none.
double gpu_tok_s_from_report(const std::string& path, const std::string& shape, int64_t tokens) {
  auto number = [](const Json& row, const char* key) -> std::optional<double> {
    const auto it = row.find(key);
    if (it == row.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  std::ifstream in(path);
  double best = 0, best_distance = 0;
  bool best_shape = false;
  for (std::string line; std::getline(in, line);) {
    const Json row = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;  // not a JSON row (or a discarded parse)
    const std::optional<double> tok_s = number(row, "prefill_tok_per_s"), row_tokens = number(row, "tokens");
    if (!tok_s || *tok_s <= 0 || !row_tokens) continue;
    const auto row_shape = row.find("shape");
    const bool same_shape = row_shape != row.end() && row_shape->is_string() && row_shape->get<std::string>() == shape;
    const double distance = std::fabs(std::log(*row_tokens / static_cast<double>(tokens)));
    if (best == 0 || (same_shape && !best_shape) || (same_shape == best_shape && distance < best_distance)) {
      best = *tok_s, best_distance = distance, best_shape = same_shape;
    }
  }
  return best;
}

struct SplitFlags {
  std::string model_path, cloud_model_path, lengths_text, profile_names = "fiber,wifi,4g", profiles_path;
  std::string codec_list, calibration_path, plot_path, device_report;
  int64_t threads = 2, decode_tokens = 32, max_len = 0, chunk_tokens = 256, repeat = 1, early_tokens = 4;
  double gpu_tok_s = 0, gpu_decode_ms = 0, loss_pct = 0, max_kv_loss_pct = kDefaultMaxKvLossPct;
  bool json = false;
};

// Parses and checks the flags; false after --help.
absl::StatusOr<bool> parse_split_flags(const Args& args, SplitFlags& f) {
  FlagSet flags("baton bench split",
                "--model EDGE_Q4_0 [--cloud-model FILE] [--prompt-lens 128,256,...] [--profiles fiber,wifi,4g] "
                "[--codec LIST|auto] [--calibration F.batoncal] [--max-kv-loss PCT] [--gpu-prefill-tok-s N | --device-report bench.jsonl] [--early-tokens K] [--plot F.png] [--json]",
                "When does the split pay: per prompt length, time to first token local-only (the edge's own "
                "prefill) vs split (a real baton-prefill on loopback, CPU backend, streaming the KV through "
                "read_kv_segment into the edge store), bytes on the wire and decode tok/s, all measured here; "
                "the WAN is modeled per profile from deploy/wan/profiles (transfer = wire bytes / (rate x (1 - "
                "loss)); split TTFT = RTT + max(cloud, first block + transfer) + ingest + last token), not "
                "emulated. PROJECTION rows replace the CPU cloud by a GPU prefill speed. Each codec of --codec is "
                "measured cloud-only; auto adds the rows of the codec the edge's --codec auto picks per profile "
                "and length (from the calibration's quality table) with the overlapped plan. With --early-tokens K "
                "the baseline codec's rows gain the early-token split: the cloud samples K tokens after the prompt "
                "and sends them ahead of the KV (early TTFT = RTT + the first early token over loopback + the KV bytes "
                "ahead of it / rate).");
  flags.add_string("model", &f.model_path, "the edge's GGUF model (Q4_0)", "FILE");
  flags.add_string("cloud-model", &f.cloud_model_path, "the cloud's GGUF model (default: --model)", "FILE");
  flags.add_string("prompt-lens", &f.lengths_text, "comma-separated prompt lengths (default 128, 256, ... up to the "
                   "model's n_ctx_train or --max-len)", "LIST");
  flags.add_int64("max-len", &f.max_len, "longest default prompt length (0: the model's n_ctx_train)");
  flags.add_string("profiles", &f.profile_names, "WAN profiles to model (names in the profiles file)", "LIST");
  flags.add_string("profiles-file", &f.profiles_path, "WAN profiles file (default deploy/wan/profiles)", "FILE");
  flags.add_double("loss", &f.loss_pct, "packet loss percent applied to every profile (as wan-up.sh --loss)");
  flags.add_string("codec", &f.codec_list,
                   "wire codecs, comma-separated, each measured cloud-only (G stands for min(32, head_dim)); auto: "
                   "the edge's default int4 and every codec of the calibration's quality table, and the auto rows; "
                   "the first is the baseline of the gains (default: auto with --calibration, else int8-gG-z3)",
                   "LIST");
  flags.add_string("calibration", &f.calibration_path,
                   "the model's KV calibration (baton model calibrate): the transform codecs' basis (the cloud "
                   "holds it too) and auto's quality table", "FILE");
  flags.add_double("max-kv-loss", &f.max_kv_loss_pct,
                   "auto's quality floor, as baton-edge --max-kv-loss: the most perplexity change in percent");
  flags.add_int64("threads", &f.threads, "CPU threads of the edge engine and of the cloud backend");
  flags.add_int64("decode-tokens", &f.decode_tokens, "tokens decoded and timed per length");
  flags.add_int64("repeat", &f.repeat, "measurements per length; each time is the median over them (a busy machine)");
  flags.add_int64("chunk-tokens", &f.chunk_tokens, "the cloud's tokens per prefill chunk / stream slice");
  flags.add_double("gpu-prefill-tok-s", &f.gpu_tok_s, "GPU prefill tok/s for the PROJECTION rows");
  flags.add_string("device-report", &f.device_report, "bench.jsonl of a CUDA device check: GPU prefill tok/s for "
                   "the PROJECTION rows", "FILE");
  flags.add_int64("early-tokens", &f.early_tokens,
                  "tokens the cloud samples ahead of the KV (PrefillRequest.early_tokens, greedy), measured with the "
                  "baseline codec, 0..64; 0: no early rows");
  flags.add_double("gpu-decode-ms", &f.gpu_decode_ms,
                   "one GPU decode step in ms for the PROJECTION's early rows (default: an assumption from the "
                   "weight bytes and the H200's memory bandwidth, printed as such)");
  flags.add_string("plot", &f.plot_path, "write TTFT vs prompt length as a PNG (gnuplot)", "FILE.png");
  flags.add_bool("json", &f.json, "print one JSON object instead of the tables");
  flags.require("model");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return false;
  if (f.threads < 1 || f.decode_tokens < 1 || f.chunk_tokens < 1 || f.repeat < 1) {
    return absl::InvalidArgumentError("--threads, --decode-tokens, --chunk-tokens and --repeat must be >= 1");
  }
  if (f.early_tokens < 0 || f.early_tokens > kMaxEarlyTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--early-tokens %d is not in 0..%d", f.early_tokens, kMaxEarlyTokens));
  }
  if (f.gpu_decode_ms < 0) return absl::InvalidArgumentError(absl::StrFormat("--gpu-decode-ms %g is < 0", f.gpu_decode_ms));
  if (f.loss_pct < 0 || f.loss_pct >= 100) {
    return absl::InvalidArgumentError(absl::StrFormat("--loss %g is not in [0, 100)", f.loss_pct));
  }
  if (f.cloud_model_path.empty()) f.cloud_model_path = f.model_path;
  if (f.codec_list.empty()) f.codec_list = f.calibration_path.empty() ? "int8-gG-z3" : "auto";
  return true;
}

// The prompt lengths: --prompt-lens sorted, else 128, 256, ... up to the limit.
absl::StatusOr<std::vector<int64_t>> prompt_lengths(const SplitFlags& f, const ModelSpec& spec) {
  const int64_t limit = f.max_len > 0 ? f.max_len : (spec.n_ctx_train > 0 ? spec.n_ctx_train : 2048);
  std::vector<int64_t> lengths;
  if (f.lengths_text.empty()) {
    for (int64_t n = 128; n <= limit; n *= 2) lengths.push_back(n);
  } else {
    for (const std::string& item : std::vector<std::string>(absl::StrSplit(f.lengths_text, ',', absl::SkipEmpty()))) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(item, &n) || n < 2) {
        return absl::InvalidArgumentError("--prompt-lens: '" + item + "' is not a length >= 2");
      }
      lengths.push_back(n);
    }
    std::sort(lengths.begin(), lengths.end());
  }
  if (lengths.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("no prompt length from 128 fits the limit of %d tokens", limit));
  }
  return lengths;
}

// The GPU prefill speed of the projection per length, and where it came
// from: --gpu-prefill-tok-s, a device report, or an assumption (H200 at 40%
// of 989 TFLOP/s, 2 x matmul params FLOP/token).
absl::Status gpu_projection(const SplitFlags& f, const Model& model, SplitRun& run) {
  auto gpu_tok_s_for = [&](int64_t tokens) -> double {
    if (f.gpu_tok_s > 0) return f.gpu_tok_s;
    if (!f.device_report.empty()) return gpu_tok_s_from_report(f.device_report, model.spec().name, tokens);
    return 0;
  };
  // Matmul parameters per token (layer matrices and the output projection):
  // the assumption's FLOPs per token are 2 x params (attention left out).
  const double params = static_cast<double>(layer_matrix_elements(model)) +
                        static_cast<double>(model.output().rows) * static_cast<double>(model.output().cols);
  const double assumed_gpu_tok_s = 0.4 * 989e12 / (2.0 * params);
  if (f.gpu_tok_s > 0) {
    run.gpu_source = "--gpu-prefill-tok-s";
  } else if (!f.device_report.empty()) {
    if (gpu_tok_s_for(run.lengths.back()) <= 0) {
      return absl::InvalidArgumentError("--device-report " + f.device_report + ": no prefill_tok_per_s rows");
    }
    run.gpu_source = "device check " + f.device_report;
  } else {
    run.gpu_source =
        "ASSUMED (no device report): H200 at 40% of 989 TFLOP/s, 2 x params FLOP/token; compute-bound, so "
        "optimistic for small models and short prompts, which are launch-latency-bound on a GPU";
  }
  for (int64_t n : run.lengths) run.gpu_rates.push_back(gpu_tok_s_for(n) > 0 ? gpu_tok_s_for(n) : assumed_gpu_tok_s);
  // One decode step of the early rows: memory-bound, each step reads every
  // matmul weight once (F16, 2 bytes each).
  if (f.gpu_decode_ms > 0) {
    run.gpu_decode_step_ms = f.gpu_decode_ms;
    run.gpu_decode_source = "--gpu-decode-ms";
  } else {
    run.gpu_decode_step_ms = 2.0 * params / (0.6 * 4.8e12) * 1000.0;
    run.gpu_decode_source =
        "ASSUMED: F16 weights (2 B x matmul params) read once per step at 60% of the H200's 4.8 TB/s; kernel "
        "launch latency left out, so optimistic for small models";
  }
  return absl::OkStatus();
}

// Warm-up: page the edge weights in and open the channel (untimed).
absl::Status warm_up(const SplitSetup& setup) {
  LengthResult ignored;
  const std::vector<int32_t> warm = synthetic_tokens(8, setup.edge_model->spec().n_vocab, 1);
  std::unique_ptr<QuantizedKvCache> kv;
  for (const CodecSetup& codec : setup.codecs) {
    BATON_ASSIGN_OR_RETURN(kv, QuantizedKvCache::Create(setup.engine->kv_geometry(), 16, codec.store));
    BATON_RETURN_IF_ERROR(with_context(absl::StrCat("warm-up cloud prefill (", codec.wire.to_string(), "): "),
                                       cloud_prefill(setup, codec, warm, *kv, ignored)));
  }
  if (setup.early_tokens > 0) {  // the cloud's decode path too
    BATON_RETURN_IF_ERROR(with_context("warm-up early tokens: ",
                                       measure_early(setup, setup.codecs[0], warm, 8 + setup.early_tokens,
                                                     /*local_first=*/0, ignored)));
  }
  std::vector<float> logits;
  return setup.engine->decode_step(warm[0], *kv, &logits);
}

// Every length, each the median of --repeat measurements (per codec).
absl::Status measure_lengths(const SplitSetup& setup, const SplitFlags& f, SplitRun& run) {
  for (int64_t n : run.lengths) {
    if (!f.json) std::fprintf(stderr, "baton bench split: prompt %lld tokens ...\n", static_cast<long long>(n));
    std::vector<std::vector<LengthResult>> runs(setup.codecs.size());  // per codec
    for (int64_t i = 0; i < f.repeat; ++i) {
      absl::StatusOr<std::vector<LengthResult>> r = measure_length(setup, n);
      if (!r.ok()) return absl::Status(r.status().code(), absl::StrFormat("prompt %d: %s", n, r.status().message()));
      for (size_t c = 0; c < r->size(); ++c) runs[c].push_back((*r)[c]);
    }
    for (size_t c = 0; c < runs.size(); ++c) run.codecs[c].results.push_back(median_of(runs[c]));
  }
  return absl::OkStatus();
}

// The codecs of --codec, the baseline first, each once: a name or pattern as
// such, auto as the edge's default (int4) and the quality table's codecs.
absl::StatusOr<std::vector<KvCodecConfig>> listed_codecs(const SplitFlags& f, const KvGeometry& geometry,
                                                         const KvCalibration* calibration, SplitRun& run) {
  std::vector<KvCodecConfig> out;
  auto add = [&](const KvCodecConfig& config) -> absl::Status {
    BATON_RETURN_IF_ERROR(with_context(absl::StrCat("--codec ", config.to_string(), ": "), config.validate(geometry)));
    if (std::find(out.begin(), out.end(), config) == out.end()) out.push_back(config);
    return absl::OkStatus();
  };
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(f.codec_list, ',', absl::SkipEmpty()))) {
    if (name != "auto") {
      BATON_ASSIGN_OR_RETURN(const KvCodecConfig config,
                             parse_kv_codec_config(expand_codec_list(name, geometry.head_dim)));
      BATON_RETURN_IF_ERROR(add(config));
      continue;
    }
    if (calibration == nullptr || calibration->quality.empty()) {
      return absl::InvalidArgumentError(
          "--codec auto needs --calibration with a quality table (baton model calibrate measures one)");
    }
    run.auto_codec = true;
    run.table = calibration->quality;
    BATON_RETURN_IF_ERROR(add(default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry)));
    for (const KvCodecQuality& row : calibration->quality) {
      BATON_ASSIGN_OR_RETURN(const KvCodecConfig config, parse_kv_codec_config(row.codec));
      BATON_RETURN_IF_ERROR(add(config));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("--codec names no codec");
  return out;
}

// Each codec's coder (a transform codec binds the calibration) and store.
absl::Status make_codec_setups(const std::vector<KvCodecConfig>& configs, const KvGeometry& geometry,
                               const std::shared_ptr<const KvCalibration>& calibration, SplitSetup& setup) {
  for (const KvCodecConfig& config : configs) {
    CodecSetup codec;
    codec.wire = config;
    if (config.transform_coded()) {
      if (calibration == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("--codec ", config.to_string(),
                                                       ": the transform codec needs --calibration FILE"));
      }
      BATON_ASSIGN_OR_RETURN(codec.transform, KvTransformCodec::Create(calibration, config));
      codec.wire = codec.transform->config();
    }
    codec.store = edge_store_config(codec.wire, geometry);
    setup.codecs.push_back(std::move(codec));
  }
  return absl::OkStatus();
}

// The cloud: a real service and server on loopback, no caches (each request
// computes everything).
absl::StatusOr<std::unique_ptr<InProcessCloud>> start_cloud(const SplitFlags& f, int64_t longest,
                                                             std::shared_ptr<const KvCalibration> calibration) {
  PrefillServiceOptions options;
  options.kv_calibration = std::move(calibration);
  options.threads = static_cast<int>(f.threads);
  options.max_running = 1;
  options.chunk_tokens = static_cast<int>(f.chunk_tokens);
  options.max_context_tokens = longest + f.early_tokens;  // the prompt and the early tokens sampled after it
  options.prefix_cache_bytes = 0;
  options.session_cache_bytes = 0;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<InProcessCloud> cloud, InProcessCloud::Start(options));
  BATON_RETURN_IF_ERROR(with_context("cloud: ", cloud->Load(f.cloud_model_path)));
  return cloud;
}

}  // namespace

absl::Status bench_split(const Args& args) {
  SplitFlags f;
  BATON_ASSIGN_OR_RETURN(const bool run_it, parse_split_flags(args, f));
  if (!run_it) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(LoadedModel edge, load_model(f.model_path, f.threads));
  const ModelSpec& spec = edge.spec();
  SplitRun run;
  BATON_ASSIGN_OR_RETURN(run.lengths, prompt_lengths(f, spec));
  if (f.profiles_path.empty()) f.profiles_path = default_profiles_path();
  BATON_ASSIGN_OR_RETURN(run.profiles, read_profiles(f.profiles_path, absl::StrSplit(f.profile_names, ',', absl::SkipEmpty()),
                                                      f.loss_pct / 100));
  std::shared_ptr<const KvCalibration> calibration;
  if (!f.calibration_path.empty()) {
    BATON_ASSIGN_OR_RETURN(KvCalibration loaded, load_kv_calibration(f.calibration_path));
    BATON_RETURN_IF_ERROR(with_context(absl::StrCat("--calibration ", f.calibration_path, ": "),
                                       loaded.check_geometry(edge.engine->kv_geometry())));
    calibration = std::make_shared<const KvCalibration>(std::move(loaded));
  }
  const KvGeometry geometry = edge.engine->kv_geometry();
  SplitSetup setup;
  BATON_ASSIGN_OR_RETURN(const std::vector<KvCodecConfig> configs,
                         listed_codecs(f, geometry, calibration.get(), run));
  BATON_RETURN_IF_ERROR(make_codec_setups(configs, geometry, calibration, setup));
  BATON_ASSIGN_OR_RETURN(setup.edge_fingerprint, model_fingerprint(*edge.model));
  BATON_RETURN_IF_ERROR(gpu_projection(f, *edge.model, run));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<InProcessCloud> cloud, start_cloud(f, run.lengths.back(), calibration));
  setup.engine = edge.engine.get();
  setup.edge_model = edge.model.get();
  setup.rope = kv_rope_of(*edge.model);
  setup.stub = &cloud->stub();
  setup.chunk_tokens = f.chunk_tokens;
  setup.decode_tokens = f.decode_tokens;
  setup.early_tokens = f.early_tokens;
  for (const CodecSetup& codec : setup.codecs) {
    CodecRun& c = run.codecs.emplace_back();
    c.config = codec.wire;
    c.codec = codec.wire.to_string();
    c.store = codec.store.to_string();
    c.store_bytes_per_token = static_cast<double>(QuantizedKvCache::bytes_per_token(codec.store, geometry));
  }
  BATON_RETURN_IF_ERROR(warm_up(setup));
  BATON_RETURN_IF_ERROR(measure_lengths(setup, f, run));
  cloud->Shutdown();

  run.model_name = spec.name;
  run.edge_model = f.model_path;
  run.cloud_model = f.cloud_model_path;
  run.calibration = f.calibration_path;
  run.max_kv_loss_pct = f.max_kv_loss_pct;
  run.f16_bytes_per_token = 2.0 * static_cast<double>(spec.kv_elements_per_token());
  run.threads = f.threads;
  run.decode_tokens = f.decode_tokens;
  run.repeat = f.repeat;
  run.plot_path = f.plot_path;
  run.early_tokens = f.early_tokens;
  model_profiles(run);
  if (f.json) {
    print_json_line(split_json(run));
  } else {
    print_split_tables(run);
  }
  if (!f.plot_path.empty()) {
    BATON_RETURN_IF_ERROR(write_split_plot(run));
    if (!f.json) std::printf("\nplot: %s\n", f.plot_path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
