// `baton bench prefill-service`: the cloud service end to end on loopback — a
// real PrefillServer and a real gRPC client in one process. Measures, for one
// prompt: time to the first KV block vs the whole stream (the first block
// should come after about 1 / (chunks x layers) of the work, since blocks go
// out as each chunk's layers complete), prefill tokens/s, and the prefix-cache
// speedup for a second prompt that shares the first X% of the tokens.
// With --state URL: two replicas sharing that Redis instead (issue 19): time
// to the trailer cold, on an L1 hit and on an L2 hit from the other replica,
// and the bytes Redis holds per cached token.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_harness.h"
#include "cloud_prefill/state/redis_client.h"
#include "common/kv_stream/prefix_digest.h"
#include "bench_report.h"
#include "common/rpc/channel_options.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "in_process_cloud.h"

#if BATON_HAVE_CUDA
#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#endif

namespace baton::cli {
namespace {

struct StreamTiming {
  double first_block_ms = 0;   // call start to the first KvBlock
  double total_ms = 0;         // call start to the trailer
  uint64_t wire_bytes = 0;     // payload bytes received
  v1::ProducerStats producer;
};

absl::StatusOr<StreamTiming> timed_prefill(v1::Prefill::Stub& stub, const std::vector<int32_t>& tokens,
                                           v1::KvCodec codec, const std::string& cache_salt = "") {
  v1::PrefillRequest request;
  request.set_cache_salt(cache_salt);
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

// One replica of the bench: one worker, a prompt-sized context, a prefix
// cache large enough for every prompt.
PrefillServiceOptions bench_service_options(const ModelBenchFlags& c, int64_t prompt_len, int64_t chunk_tokens) {
  PrefillServiceOptions options;
  options.threads = static_cast<int>(c.threads);
  options.max_running = 1;
  options.chunk_tokens = static_cast<int>(chunk_tokens);
  options.max_context_tokens = prompt_len + 1;
  options.prefix_cache_bytes = uint64_t{16} << 30;
  return options;
}

// --backend: cpu (the service's own threads), or cuda (the CUDA backend on
// GPU 0, as baton-prefill --backend cuda runs it).
absl::Status select_bench_backend(const std::string& backend, PrefillServiceOptions& options) {
  if (backend == "cpu") return absl::OkStatus();
  if (backend != "cuda") return absl::InvalidArgumentError("--backend '" + backend + "' is not one of cpu, cuda");
#if BATON_HAVE_CUDA
  BATON_ASSIGN_OR_RETURN(options.backend_factory, cuda::make_cuda_prefill_backend_factory(cuda::CudaBackendOptions{}));
  return absl::OkStatus();
#else
  (void)options;
  return absl::FailedPreconditionError("--backend cuda: this baton was built without CUDA");
#endif
}

// Redis's used_memory, bytes, summed over every node the client knows
// (one node: that server).
absl::StatusOr<int64_t> redis_used_memory(RedisClient& redis) {
  const std::string_view argv[] = {"INFO", "memory"};
  BATON_ASSIGN_OR_RETURN(const RedisReply reply, redis.command("", argv));
  const std::string field = "used_memory:";
  const size_t at = reply.str.find(field);
  const size_t end = at == std::string::npos ? at : reply.str.find_first_of("\r\n", at);
  int64_t bytes = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(reply.str.substr(at + field.size(), end - at - field.size()), &bytes)) {
    return absl::InternalError("INFO memory has no used_memory field");
  }
  return bytes;
}

// Two replicas sharing one Redis (--state): time to the trailer for a cold
// prompt on replica A, the same prompt again on A (an L1 hit), then on B (an
// L2 hit: B has never seen it), and the bytes Redis holds per cached token.
// A fresh random cache_salt per run keeps earlier runs' blocks out of it.
absl::Status bench_shared_state(const ModelBenchFlags& c, const std::string& state_url, int64_t prompt_len,
                                int64_t chunk_tokens, v1::KvCodec codec, const std::string& codec_name) {
  BATON_ASSIGN_OR_RETURN(const RedisOptions redis_options, parse_redis_url(state_url));
  std::vector<std::unique_ptr<InProcessCloud>> replicas;
  for (int i = 0; i < 2; ++i) {
    PrefillServiceOptions options = bench_service_options(c, prompt_len, chunk_tokens);
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> client, make_redis_client(redis_options));
    options.state_redis = std::move(client);
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<InProcessCloud> cloud, InProcessCloud::Start(options));
    BATON_RETURN_IF_ERROR(cloud->Load(c.model));
    replicas.push_back(std::move(cloud));
  }
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> probe, make_redis_client(redis_options));
  BATON_ASSIGN_OR_RETURN(const std::unique_ptr<Model> model, Model::Load(c.model));
  const ModelSpec& spec = model->spec();
  const std::vector<int32_t> prompt = synthetic_tokens(prompt_len, spec.n_vocab, 1);
  const std::string salt = absl::StrFormat("bench-%016x", absl::Uniform<uint64_t>(absl::BitGen()));

  BATON_ASSIGN_OR_RETURN(const int64_t memory_before, redis_used_memory(*probe));
  BATON_ASSIGN_OR_RETURN(const StreamTiming cold, timed_prefill(replicas[0]->stub(), prompt, codec, salt));
  BATON_ASSIGN_OR_RETURN(const StreamTiming l1, timed_prefill(replicas[0]->stub(), prompt, codec, salt));
  // The blocks reach Redis behind the trailer (write-behind): wait until
  // its memory stops growing.
  int64_t memory_after = memory_before;
  for (int quiet = 0, i = 0; quiet < 3 && i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    BATON_ASSIGN_OR_RETURN(const int64_t now, redis_used_memory(*probe));
    quiet = now == memory_after ? quiet + 1 : 0;
    memory_after = now;
  }
  BATON_ASSIGN_OR_RETURN(const StreamTiming l2, timed_prefill(replicas[1]->stub(), prompt, codec, salt));
  for (auto& replica : replicas) replica->Shutdown();

  const int64_t cached_tokens = prompt_len / kPrefixDigestBlockTokens * kPrefixDigestBlockTokens;
  const KvGeometry geometry = kv_geometry_for(spec);
  const double f32_per_token = 2.0 * spec.n_layer * static_cast<double>(geometry.kv_dim()) * sizeof(float);
  BenchReport report(absl::StrFormat(
      "two baton-prefill replicas, one Redis (%s): %d-token prompt, %s, %d threads, chunk %d, codec %s", state_url,
      prompt_len, spec.arch, c.threads, chunk_tokens, codec_name));
  report.add_text("backend", "backend", cold.producer.backend());
  report.add("cold_total_ms", "cold (A): time to trailer", cold.total_ms, "ms", 1);
  report.add("l1_total_ms", "L1 hit (A again): time to trailer", l1.total_ms, "ms", 1);
  report.add_int("l1_cached_tokens", "L1 hit: tokens reused", l1.producer.cached_tokens());
  report.add("l2_total_ms", "L2 hit (B, from Redis): time to trailer", l2.total_ms, "ms", 1);
  report.add_int("l2_cached_tokens", "L2 hit: tokens reused", l2.producer.cached_tokens());
  report.add("l1_speedup", "L1 speedup (cold / L1)", cold.total_ms / l1.total_ms, "x", 2);
  report.add("l2_speedup", "L2 speedup over recompute (cold / L2)", cold.total_ms / l2.total_ms, "x", 2);
  report.add_int("redis_bytes", "Redis memory added", static_cast<long long>(memory_after - memory_before), "B");
  report.add("redis_bytes_per_token", "Redis bytes per cached token",
             static_cast<double>(memory_after - memory_before) / static_cast<double>(cached_tokens), "B", 0);
  report.add("f32_bytes_per_token", "f32 KV bytes per token (K and V, every layer)", f32_per_token, "B", 0);
  report.print(c.json);
  if (l2.producer.cached_tokens() == 0) {
    return absl::InternalError("replica B reused nothing: the shared tier did not serve the prompt's blocks");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status bench_prefill_service(const Args& args) {
  ModelBenchFlags c;
  std::string codec_name = "int8";
  int64_t prompt_len = 1024, chunk_tokens = 256;
  double cached_fraction = 0.75;
  std::string state_url, backend = "cpu";
  int64_t encode_threads = 0;
  bool warmup = false;
  FlagSet flags("baton bench prefill-service",
                "--model FILE [--prompt-len N] [--cached-fraction F] [--state redis://HOST:PORT] [--json]",
                "baton-prefill on loopback (real server, real gRPC client, CPU or CUDA backend): time to the first KV "
                "block vs the whole stream, prefill tokens/s, and the prefix-cache speedup for a prompt whose "
                "first F of the tokens were prefilled before.");
  flags.add_string("model", &c.model, "GGUF model file the service loads", "FILE");
  flags.add_int64("threads", &c.threads, "CPU threads of the service's backend");
  flags.add_string("backend", &backend, "compute backend: cpu or cuda (GPU 0)", "NAME");
  flags.add_bool("warmup", &warmup,
                 "send one unrelated prompt of the same length first (untimed), so the cold figures leave out "
                 "the process's first-request setup (on CUDA: streams, cuBLAS, scratch and pinned buffers)");
  flags.add_int64("encode-threads", &encode_threads,
                  "threads encoding the stream's blocks, as baton-prefill --encode-threads (0: auto)");
  flags.add_int64("prompt-len", &prompt_len, "prompt tokens");
  flags.add_int64("chunk-tokens", &chunk_tokens, "tokens per compute chunk / stream slice");
  flags.add_double("cached-fraction", &cached_fraction, "share of the second prompt that the first one covers");
  flags.add_string("codec", &codec_name, "wire codec: f16, int8 or int4", "NAME");
  flags.add_bool("json", &c.json, "print one JSON object instead of the table");
  flags.add_string("state", &state_url,
                   "measure two replicas sharing this Redis instead: cold, L1 hit, L2 hit (other replica), Redis "
                   "bytes per cached token",
                   "URL");
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
  if (!state_url.empty() && backend != "cpu") {
    return absl::InvalidArgumentError("--state measures the CPU backend's replicas; leave --backend out");
  }
  if (!state_url.empty()) return bench_shared_state(c, state_url, prompt_len, chunk_tokens, codec, codec_name);

  PrefillServiceOptions options = bench_service_options(c, prompt_len, chunk_tokens);
  BATON_RETURN_IF_ERROR(select_bench_backend(backend, options));
  if (encode_threads < 0) return absl::InvalidArgumentError("--encode-threads must be >= 0");
  options.encode_threads = static_cast<int>(encode_threads);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<InProcessCloud> cloud, InProcessCloud::Start(options));
  BATON_RETURN_IF_ERROR(cloud->Load(c.model));
  BATON_ASSIGN_OR_RETURN(const std::unique_ptr<Model> model, Model::Load(c.model));
  const ModelSpec& spec = model->spec();

  if (warmup) {
    // Seed 3: shares no prefix-cache block with the prompts below.
    BATON_RETURN_IF_ERROR(timed_prefill(cloud->stub(), synthetic_tokens(prompt_len, spec.n_vocab, 3), codec).status());
  }
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
  report.add_text("codec", "codec", codec_name);
  report.add_int("encode_threads", "encode threads (0: auto)", encode_threads);
  report.add_text("warmup", "warm-up request first", warmup ? "yes" : "no");
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
  report.add("stream_mb_per_s", "cold: KV payload MB/s end to end (to trailer)",
             static_cast<double>(cold.wire_bytes) / 1e3 / cold.total_ms, "MB/s", 1);
  report.add_int("warm_cached_tokens", "warm: tokens from the prefix cache", warm.producer.cached_tokens());
  report.add_int("warm_computed_tokens", "warm: tokens computed", warm.producer.computed_tokens());
  report.add("warm_total_ms", "warm: time to trailer", warm.total_ms, "ms", 1);
  report.add("prefix_cache_speedup", "prefix-cache speedup (cold total / warm total)", cold.total_ms / warm.total_ms,
             "x", 2);
  report.print(c.json);
  return absl::OkStatus();
}

}  // namespace baton::cli
