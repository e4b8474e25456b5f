// `baton bench prefill-service`: the cloud service end to end on loopback — a
// real PrefillServer and a real gRPC client in one process. Measures, for one
// prompt: time to the first KV block vs the whole stream (the first block
// should come after about 1 / (chunks x layers) of the work, since blocks go
// out as each chunk's layers complete), prefill tokens/s, and the prefix-cache
// speedup for a second prompt that shares the first X% of the tokens.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_harness.h"
#include "bench_report.h"
#include "common/rpc/channel_options.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "in_process_cloud.h"

namespace baton::cli {
namespace {

struct StreamTiming {
  double first_block_ms = 0;   // call start to the first KvBlock
  double total_ms = 0;         // call start to the trailer
  uint64_t wire_bytes = 0;     // payload bytes received
  v1::ProducerStats producer;
};

absl::StatusOr<StreamTiming> timed_prefill(v1::Prefill::Stub& stub, const std::vector<int32_t>& tokens,
                                           v1::KvCodec codec) {
  v1::PrefillRequest request;
  for (int32_t t : tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(t));
  request.mutable_codec()->set_codec(codec);
  grpc::ClientContext context;
  prepare_call(context, std::chrono::system_clock::now() + std::chrono::minutes(30), /*bearer_token=*/"");
  StreamTiming timing;
  const Clock::time_point start = Clock::now();
  auto reader = stub.Prefill(&context, request);
  v1::KvStreamMessage message;
  bool seen_block = false;
  while (reader->Read(&message)) {
    if (message.has_block()) {
      if (!seen_block) timing.first_block_ms = ms_between(start, Clock::now());
      seen_block = true;
      timing.wire_bytes += message.block().payload().size();
    } else if (message.has_trailer()) {
      timing.total_ms = ms_between(start, Clock::now());
      timing.producer = message.trailer().producer();
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return absl::InternalError(absl::StrCat("Prefill failed: ", status.error_message()));
  return timing;
}

}  // namespace

absl::Status bench_prefill_service(const Args& args) {
  ModelBenchFlags c;
  std::string codec_name = "int8";
  int64_t prompt_len = 1024, chunk_tokens = 256;
  double cached_fraction = 0.75;
  FlagSet flags("baton bench prefill-service", "--model FILE [--prompt-len N] [--cached-fraction F] [--json]",
                "baton-prefill on loopback (real server, real gRPC client, CPU backend): time to the first KV "
                "block vs the whole stream, prefill tokens/s, and the prefix-cache speedup for a prompt whose "
                "first F of the tokens were prefilled before.");
  flags.add_string("model", &c.model, "GGUF model file the service loads", "FILE");
  flags.add_int64("threads", &c.threads, "CPU threads of the service's backend");
  flags.add_int64("prompt-len", &prompt_len, "prompt tokens");
  flags.add_int64("chunk-tokens", &chunk_tokens, "tokens per compute chunk / stream slice");
  flags.add_double("cached-fraction", &cached_fraction, "share of the second prompt that the first one covers");
  flags.add_string("codec", &codec_name, "wire codec: f16, int8 or int4", "NAME");
  flags.add_bool("json", &c.json, "print one JSON object instead of the table");
  flags.require("model");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (prompt_len < 2 || cached_fraction < 0 || cached_fraction >= 1) {
    return absl::InvalidArgumentError("--prompt-len must be >= 2 and --cached-fraction in [0, 1)");
  }
  const v1::KvCodec codec = codec_name == "f16"    ? v1::KV_CODEC_F16
                            : codec_name == "int4" ? v1::KV_CODEC_INT4
                            : codec_name == "int8" ? v1::KV_CODEC_INT8
                                                   : v1::KV_CODEC_UNSPECIFIED;
  if (codec == v1::KV_CODEC_UNSPECIFIED) return absl::InvalidArgumentError("--codec must be f16, int8 or int4");

  PrefillServiceOptions options;
  options.threads = static_cast<int>(c.threads);
  options.max_running = 1;
  options.chunk_tokens = static_cast<int>(chunk_tokens);
  options.max_context_tokens = prompt_len + 1;
  options.prefix_cache_bytes = uint64_t{16} << 30;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<InProcessCloud> cloud, InProcessCloud::Start(options));
  BATON_RETURN_IF_ERROR(cloud->Load(c.model));
  BATON_ASSIGN_OR_RETURN(const std::unique_ptr<Model> model, Model::Load(c.model));
  const ModelSpec& spec = model->spec();

  // Cold: nothing cached.
  const std::vector<int32_t> cold_prompt = synthetic_tokens(prompt_len, spec.n_vocab, 1);
  BATON_ASSIGN_OR_RETURN(const StreamTiming cold, timed_prefill(cloud->stub(), cold_prompt, codec));
  // Warm: the same first `cached_fraction` of the tokens, then new ones.
  const int64_t shared = static_cast<int64_t>(static_cast<double>(prompt_len) * cached_fraction);
  std::vector<int32_t> warm_prompt(cold_prompt.begin(), cold_prompt.begin() + shared);
  const std::vector<int32_t> fresh = synthetic_tokens(prompt_len - shared, spec.n_vocab, 2);
  warm_prompt.insert(warm_prompt.end(), fresh.begin(), fresh.end());
  BATON_ASSIGN_OR_RETURN(const StreamTiming warm, timed_prefill(cloud->stub(), warm_prompt, codec));
  cloud->Shutdown();

  const int64_t chunks = (prompt_len + chunk_tokens - 1) / chunk_tokens;
  BenchReport report(absl::StrFormat("baton-prefill on loopback: %d-token prompt, %s, %d threads, chunk %d, codec %s",
                                     prompt_len, spec.arch, c.threads, chunk_tokens, codec_name));
  report.add_text("backend", "backend", cold.producer.backend());
  report.add_int("n_layer", "layers", spec.n_layer);
  report.add_int("chunks", "compute chunks", chunks);
  report.add("first_block_ms", "cold: time to first KV block", cold.first_block_ms, "ms", 1);
  report.add("total_ms", "cold: time to trailer (whole stream)", cold.total_ms, "ms", 1);
  report.add("first_block_fraction", "cold: first block / total", cold.first_block_ms / cold.total_ms, "", 4);
  report.add("ideal_first_block_fraction", "ideal: 1 / (chunks x layers)",
             1.0 / static_cast<double>(chunks * spec.n_layer), "", 4);
  report.add("prefill_ms", "cold: server compute", cold.producer.prefill_ms(), "ms", 1);
  report.add("encode_tail_ms", "cold: encode after compute", cold.producer.encode_ms(), "ms", 1);
  report.add("prefill_tokens_per_s", "cold: prefill tokens/s (compute)",
             static_cast<double>(prompt_len) * 1000.0 / cold.producer.prefill_ms(), "tok/s", 1);
  report.add("stream_tokens_per_s", "cold: tokens/s end to end (to trailer)",
             static_cast<double>(prompt_len) * 1000.0 / cold.total_ms, "tok/s", 1);
  report.add_int("wire_bytes", "cold: KV payload bytes", static_cast<long long>(cold.wire_bytes), "B");
  report.add_int("warm_cached_tokens", "warm: tokens from the prefix cache", warm.producer.cached_tokens());
  report.add_int("warm_computed_tokens", "warm: tokens computed", warm.producer.computed_tokens());
  report.add("warm_total_ms", "warm: time to trailer", warm.total_ms, "ms", 1);
  report.add("prefix_cache_speedup", "prefix-cache speedup (cold total / warm total)", cold.total_ms / warm.total_ms,
             "x", 2);
  report.print(c.json);
  return absl::OkStatus();
}

}  // namespace baton::cli
