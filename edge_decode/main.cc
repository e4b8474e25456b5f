// baton-edge: the edge agent. This file only parses flags and hands the
// configuration to the agent.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/engine/draft_model.h"
#include "common/engine/sampling_proto.h"
#include "common/engine/speculative.h"
#include "common/model/model.h"
#include "common/rpc/loopback.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "common/util/listen_address.h"
#include "common/util/version.h"
#include "common/rpc/api_keys.h"
#include "common/util/metrics.h"
#include "common/util/metrics_http.h"
#include "common/util/shutdown.h"
#include "edge_decode/edge_metrics.h"
#include "edge_decode/edge_server.h"
#include "edge_decode/edge_service.h"
#include "edge_decode/http/http_front_end.h"
#include "edge_decode/plan/default_codec.h"
#include "edge_decode/plan/split_policy.h"

namespace baton {
namespace {

constexpr char kDescription[] =
    "Serves the Edge gRPC service to local clients (the baton CLI): holds INT4\n"
    "weights, sessions and prefix packs, prefills short prompts itself, asks the\n"
    "cloud (--cloud) for the KV of long ones, and decodes locally.\n"
    "Every flag may also be set in the --config file ('name = value' lines).\n"
    "A listening address may be a port alone (loopback). --version prints the version, git commit,\n"
    "build type, SIMD level and CUDA support.";

// Every knob of baton-edge, with the defaults it serves with.
struct EdgeConfig {
  std::string model_path;               // GGUF, Q4_0/Q8_0 tensors
  std::string listen_address;           // host:port of the gRPC server
  std::string cloud_address;            // host:port of baton-prefill; empty: local only
  std::string cloud_token_path;         // file holding the bearer token for the cloud
  std::string cloud_ca_path;            // PEM roots; set: TLS to the cloud
  std::string cloud_cert_path;          // client certificate (mutual TLS)
  std::string cloud_key_path;           // its private key
  bool cloud_plaintext = false;         // allow plaintext to a cloud outside loopback
  std::chrono::milliseconds cloud_timeout{60'000};  // deadline of one cloud prefill
  std::chrono::milliseconds cloud_stall_timeout{30'000};  // a cloud stream silent this long is ended
  uint64_t memory_budget_bytes = 0;     // device memory for Baton; 0: detect
  std::string http_address;             // host:port of the OpenAI-compatible API; empty: off
  std::string metrics_address;          // host:port of GET /metrics; empty: off
  std::string model_aliases;            // comma list: more ids /v1/models lists for the model
  std::string cors_origins;             // comma list of browser origins allowed to call --http; "*": any
  std::string api_key_path;             // API keys clients must present; empty: none (loopback only)
  std::string tls_cert_path;            // PEM chain: TLS on --listen and --http
  std::string tls_key_path;             // its private key
  bool insecure_public = false;         // allow a non-loopback listener without API keys
  std::string packs_dir;                // prefix packs; empty: none
  std::string sessions_dir;             // persisted sessions; empty: memory only
  std::string policy = "auto";          // auto | local | cloud
  // f16 | int8 | int4 | auto or a codec name (tc-b2), when a request leaves
  // it unset; empty: auto under --policy auto, else int4.
  std::string codec;
  double max_kv_loss = kDefaultMaxKvLossPct;  // --codec auto's floor: perplexity change in percent
  std::string kv_calibration_path;      // .batoncal for tc-*; empty: fetched from the cloud when needed
  int64_t threads = 0;                  // CPU threads; 0: one per core
  int64_t max_sessions = 16;            // sessions kept in memory
  int64_t max_session_files = 256;      // session files kept under --sessions (LRU); 0: no cap
  uint64_t max_session_disk_bytes = 4ull << 30;  // bytes of session files (LRU); 0: no cap
  uint64_t max_pulled_pack_bytes = 1ull << 30;   // pulled pack files (LRU), so one pulled pack too
  int64_t max_queued = 16;              // Generate calls waiting for a generation worker
  int64_t max_batch = 4;                // turns generating at once, their decode steps batched
  int64_t prefill_chunk = 64;           // tokens of prefill between two batched decode steps
  double local_prefill_tps = 0;         // > 0: replaces the measured local prefill speed
  int64_t max_tokens = 256;             // tokens generated when a request leaves it unset
  int64_t max_tokens_cap = 4096;        // a request asking for more is refused
  std::string context_overflow = "truncate";  // refuse | truncate | shift: a session past its context limit
  int64_t keep_tokens = 0;              // truncate: tokens at the start never dropped (besides the pack)
  int64_t early_tokens = 0;             // reply tokens the cloud samples ahead of the KV
  int64_t speculative = kDefaultSpeculativeTokens;  // most draft tokens per decode step
  std::string draft;                                 // --draft: a draft model's GGUF
  int64_t draft_threads = 1;
  std::chrono::milliseconds write_stall_timeout{10'000};  // a stream the client stops reading is cancelled
};

void register_flags(FlagSet& flags, EdgeConfig& config) {
  flags.add_string("model", &config.model_path, "GGUF model file (e.g. Q4_0, Q4_K_M)", "FILE");
  flags.add_string("listen", &config.listen_address, "gRPC address to serve on", "ADDR");
  flags.enable_config_file();
  flags.add_string("cloud", &config.cloud_address,
                   "baton-prefill address; empty: always prefill locally", "ADDR");
  flags.add_string("cloud-token-file", &config.cloud_token_path,
                   "file holding the bearer token sent to the cloud", "FILE");
  flags.add_string("cloud-ca", &config.cloud_ca_path,
                   "CA roots (PEM) for TLS to the cloud; empty: plaintext", "FILE");
  flags.add_string("cloud-cert", &config.cloud_cert_path,
                   "client certificate chain (PEM) for a cloud that requires mutual TLS; with --cloud-key", "FILE");
  flags.add_string("cloud-key", &config.cloud_key_path, "private key (PEM) of --cloud-cert", "FILE");
  flags.add_bool("cloud-plaintext", &config.cloud_plaintext,
                 "allow a plaintext connection to a cloud that is not on this machine");
  flags.add_duration("cloud-timeout", &config.cloud_timeout,
                     "deadline of one cloud prefill");
  flags.add_duration("cloud-stall-timeout", &config.cloud_stall_timeout,
                     "end a cloud KV stream that delivers nothing for this long; 0: never");
  flags.add_size("memory-budget", &config.memory_budget_bytes,
                 "device memory for weights, KV and scratch; 0: detect");
  flags.add_string("http", &config.http_address,
                   "address of the OpenAI-compatible HTTP API and the chat page at /; empty: off", "ADDR");
  flags.add_string("model-alias", &config.model_aliases,
                   "more model ids the HTTP API lists in /v1/models, comma-separated (requests may name any model; "
                   "answers name the served one)",
                   "NAME[,NAME]");
  flags.add_string("cors-origin", &config.cors_origins,
                   "browser origins (scheme://host[:port]) allowed to call the HTTP API from a web page, "
                   "comma-separated; '*': any origin (needs --api-key-file); empty: none (same origin only)",
                   "ORIGIN[,ORIGIN]");
  flags.add_string("metrics", &config.metrics_address,
                   "address of the Prometheus GET /metrics listener; empty: off", "ADDR");
  flags.add_string("api-key-file", &config.api_key_path,
                   "API keys (one per line, '#' comments, 16+ characters; mode 0600) that every call but Health must "
                   "present as 'authorization: Bearer KEY'; sessions belong to the key that created them",
                   "FILE");
  flags.add_string("tls-cert", &config.tls_cert_path,
                   "PEM certificate chain: TLS on --listen (gRPC) and --http (HTTPS); with --tls-key", "FILE");
  flags.add_string("tls-key", &config.tls_key_path, "private key (PEM) of --tls-cert", "FILE");
  flags.add_bool("insecure-public", &config.insecure_public,
                 "allow --listen, --http or --metrics on an address beyond loopback without --api-key-file");
  flags.add_string("packs", &config.packs_dir, "directory of prefix packs", "DIR");
  flags.add_string("sessions", &config.sessions_dir,
                   "directory where sessions persist; empty: memory only", "DIR");
  flags.add_string("policy", &config.policy,
                   "where to prefill when a request leaves it unset: auto, local or cloud",
                   "NAME");
  flags.add_string("codec", &config.codec,
                   "KV codec when a request leaves it unset: auto (chosen per request from the KV calibration's "
                   "quality table and the measured link; without a table int4), f16, int8, int4 or a codec name "
                   "such as tc-b2 (the transform codec); unset: auto under --policy auto, else int4",
                   "NAME");
  flags.add_double("max-kv-loss", &config.max_kv_loss,
                   "--codec auto's quality floor: the most perplexity change in percent a codec may have in the "
                   "calibration's table");
  flags.add_string("kv-calibration", &config.kv_calibration_path,
                   "KV calibration of the model for the transform codec (tc-*); empty: fetched from the --cloud "
                   "when a turn needs it",
                   "FILE");
  flags.add_int64("threads", &config.threads, "CPU threads; 0: one per core");
  flags.add_int64("max-sessions", &config.max_sessions, "sessions kept in memory");
  flags.add_int64("max-session-files", &config.max_session_files,
                  "session files kept under --sessions; the least recently used idle ones are deleted; 0: no cap");
  flags.add_size("max-session-disk", &config.max_session_disk_bytes,
                 "bytes of session files under --sessions; the least recently used idle ones are deleted; 0: no cap");
  flags.add_size("max-pulled-pack", &config.max_pulled_pack_bytes,
                 "bytes of packs pulled from the cloud (least recently used deleted first); a pack whose header "
                 "declares more KV is refused before any block; 0: no cap");
  flags.add_int64("max-queued", &config.max_queued,
                  "Generate calls that may wait for a generation worker (beyond the --max-batch running); more "
                  "are RESOURCE_EXHAUSTED with a retry hint");
  flags.add_int64("max-batch", &config.max_batch,
                  "Generate turns that run at once, each on its own session; one pass over the weights gives each "
                  "decoding turn its next token (1: one turn at a time)");
  flags.add_int64("prefill-chunk", &config.prefill_chunk,
                  "tokens of a local prefill run between two decode steps of the other turns (rounded up to a "
                  "multiple of the engine's 64-token micro-batch)");
  flags.add_double("local-prefill-tps", &config.local_prefill_tps,
                   "local prefill speed the split policy assumes, tokens/s; 0: measured at start and after each "
                   "local prefill");
  flags.add_int64("max-tokens", &config.max_tokens,
                  "tokens generated when a request leaves it unset");
  flags.add_int64("max-tokens-cap", &config.max_tokens_cap,
                  "most tokens one request may ask for; more is INVALID_ARGUMENT (bounds what a Generate stream "
                  "buffers for a slow client)");
  flags.add_string("context-overflow", &config.context_overflow,
                   "a continuing session whose conversation (with room for max_tokens) outgrows its context limit, "
                   "when a request leaves it unset: truncate (drop the oldest whole turns after the pack and the "
                   "first --keep-tokens tokens, prefill the kept tail again), shift (drop the same turns, move the "
                   "kept cells: keys re-rotated, no recompute) or refuse (with the numbers)",
                   "MODE");
  flags.add_int64("keep-tokens", &config.keep_tokens,
                  "--context-overflow truncate: tokens at the start of a conversation never dropped (e.g. a system "
                  "prompt; a pack is always kept, and a leading BOS), when a request leaves it unset");
  flags.add_int64("early-tokens", &config.early_tokens,
                  "reply tokens the cloud samples itself and sends ahead of the KV when the plan prefills through "
                  "the cloud, so a slow link does not hold back the first token (they come from the cloud's "
                  "weights; the edge then runs them into its own KV and continues), when a request leaves it "
                  "unset; 0..64, 0: none");
  flags.add_int64("speculative", &config.speculative,
                  "speculative decoding: the most tokens drafted per decode step by prompt lookup (the session's "
                  "own tokens) and verified in one pass over the weights, when a request leaves it unset; the "
                  "reply is plain decoding's, the draft length adapts to the acceptance rate and speculation "
                  "switches itself off when it does not pay; 0..16, 0: off");
  flags.add_string("draft", &config.draft,
                   "a smaller GGUF with the same tokenizer that drafts the speculative tokens where prompt lookup "
                   "finds nothing (checked at start); the reply is still the model's own",
                   "F");
  flags.add_int64("draft-threads", &config.draft_threads,
                  "threads of each decoding turn's draft-model engine (1..64; with --draft)");
  flags.add_duration("write-stall-timeout", &config.write_stall_timeout,
                     "cancel a Generate or PullPack stream whose writes make no progress for this long (a client "
                     "that stopped reading); 0: never");
  flags.require("model");
  flags.require("listen");
}

absl::Status check_address(const char* flag, const std::string& address) {
  if (absl::StatusOr<std::pair<std::string, int>> parsed = parse_host_port(address);
      !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", parsed.status().message()));
  }
  return absl::OkStatus();
}

// Nothing listens beyond loopback without keys: anyone who reaches the port
// could list, continue or delete every session.
absl::Status check_public_listeners(const EdgeConfig& config) {
  if (!config.api_key_path.empty() || config.insecure_public) return absl::OkStatus();
  const std::pair<const char*, std::string> listeners[] = {{"listen", config.listen_address},
                                                           {"http", config.http_address},
                                                           {"metrics", config.metrics_address}};
  for (const auto& [flag, address] : listeners) {
    if (address.empty()) continue;
    const std::string host = parse_host_port(address)->first;
    if (!is_loopback_host(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " ", address, " is reachable beyond this machine and no --api-key-file is set: give "
          "--api-key-file FILE (and --tls-cert/--tls-key), bind 127.0.0.1, or pass --insecure-public"));
    }
  }
  return absl::OkStatus();
}

absl::Status validate(const FlagSet& flags, const EdgeConfig& config) {
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags.positional().front(), "'"));
  }
  BATON_RETURN_IF_ERROR(check_address("listen", config.listen_address));
  if (!config.cloud_address.empty()) {
    BATON_RETURN_IF_ERROR(check_address("cloud", config.cloud_address));
    // A KV cache can be inverted to recover the prompt: it is as sensitive as
    // the prompt, so it crosses a network only under TLS unless told otherwise.
    const std::string host = parse_host_port(config.cloud_address)->first;
    if (!is_loopback_host(host) && config.cloud_ca_path.empty() && !config.cloud_plaintext) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cloud ", config.cloud_address,
          " is not on this machine and --cloud-ca is not set: the KV (as sensitive as the prompt) would cross the "
          "network in plaintext; give --cloud-ca for TLS, or --cloud-plaintext to accept that"));
    }
  }
  if (!config.http_address.empty()) {
    BATON_RETURN_IF_ERROR(check_address("http", config.http_address));
  }
  for (absl::string_view origin : absl::StrSplit(config.cors_origins, ',', absl::SkipWhitespace())) {
    BATON_RETURN_IF_ERROR(check_cors_origin(std::string(origin), !config.api_key_path.empty()));
  }
  if (!config.metrics_address.empty()) {
    BATON_RETURN_IF_ERROR(check_address("metrics", config.metrics_address));
  }
  if (config.tls_cert_path.empty() != config.tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  BATON_RETURN_IF_ERROR(check_public_listeners(config));
  if (config.policy != "auto" && config.policy != "local" && config.policy != "cloud") {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: '", config.policy, "' is not one of auto, local, cloud"));
  }
  if (config.policy == "cloud" && config.cloud_address.empty()) {
    return absl::InvalidArgumentError("--policy=cloud needs --cloud ADDR");
  }
  if (!std::isfinite(config.max_kv_loss)) {
    return absl::InvalidArgumentError(absl::StrCat("--max-kv-loss: ", config.max_kv_loss, " is not a number"));
  }
  if (!config.codec.empty() && config.codec != "f16" && config.codec != "int8" && config.codec != "int4" &&
      config.codec != "auto") {
    if (absl::StatusOr<KvCodecConfig> parsed = parse_kv_codec_config(config.codec); !parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--codec: '", config.codec,
                                                     "' is not one of auto, f16, int8, int4 nor a codec name: ",
                                                     parsed.status().message()));
    }
  }
  if (config.max_session_files < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max-session-files: ", config.max_session_files, " is below 0"));
  }
  if (config.threads < 0 || config.max_sessions < 1 || config.max_tokens < 1 || config.local_prefill_tps < 0 ||
      config.max_queued < 1 || config.max_queued > 4096 || config.write_stall_timeout.count() < 0) {
    return absl::InvalidArgumentError(
        "--threads and --local-prefill-tps must be >= 0; --max-sessions and --max-tokens >= 1; --max-queued in "
        "[1, 4096]; --write-stall-timeout >= 0");
  }
  if (absl::StatusOr<ContextOverflowMode> mode = parse_context_overflow(config.context_overflow); !mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--context-overflow: ", mode.status().message()));
  }
  if (config.keep_tokens < 0 || config.keep_tokens > kMaxKeepTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--keep-tokens %d must be in [0, %u]", config.keep_tokens, kMaxKeepTokens));
  }
  if (config.early_tokens < 0 || config.early_tokens > kMaxEarlyTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--early-tokens %d must be in [0, %u]", config.early_tokens, kMaxEarlyTokens));
  }
  if (config.max_batch < 1 || config.max_batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-batch %d must be in [1, %d]", config.max_batch, kMaxDecodeBatch));
  }
  if (config.prefill_chunk < 1 || config.prefill_chunk > kMaxPrefillChunkTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--prefill-chunk %d must be in [1, %d]", config.prefill_chunk, kMaxPrefillChunkTokens));
  }
  if (config.speculative < 0 || config.speculative > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--speculative %d must be in [0, %u]", config.speculative, kMaxSpeculativeTokens));
  }
  if (config.draft_threads < 1 || config.draft_threads > kMaxDraftThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--draft-threads %d must be in [1, %d]", config.draft_threads, kMaxDraftThreads));
  }
  if (config.max_tokens_cap < 1 || config.max_tokens_cap > 1'000'000 || config.max_tokens > config.max_tokens_cap) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-tokens-cap %d must be in [1, 1000000] and at least --max-tokens (%d)", config.max_tokens_cap,
        config.max_tokens));
  }
  return absl::OkStatus();
}

// Flags -> service options.
absl::StatusOr<EdgeServiceOptions> service_options(const EdgeConfig& config) {
  EdgeServiceOptions options;
  options.threads = static_cast<int>(config.threads);
  options.memory_budget_bytes = config.memory_budget_bytes;
  options.codec = !config.codec.empty() ? config.codec : config.policy == "auto" ? "auto" : kEdgeFallbackCodec;
  options.max_kv_loss_pct = config.max_kv_loss;
  options.kv_calibration_path = config.kv_calibration_path;
  BATON_ASSIGN_OR_RETURN(options.policy, parse_prefill_policy(config.policy));
  options.max_tokens = static_cast<int>(config.max_tokens);
  options.max_tokens_cap = static_cast<uint32_t>(config.max_tokens_cap);
  BATON_ASSIGN_OR_RETURN(options.context_overflow, parse_context_overflow(config.context_overflow));
  options.keep_tokens = static_cast<uint32_t>(config.keep_tokens);
  options.early_tokens = static_cast<uint32_t>(config.early_tokens);
  options.speculative = static_cast<uint32_t>(config.speculative);
  options.draft_model_path = config.draft;
  options.draft_threads = static_cast<int>(config.draft_threads);
  options.write_stall_timeout = config.write_stall_timeout;
  options.sessions_dir = config.sessions_dir;
  options.max_sessions = static_cast<int>(config.max_sessions);
  options.max_session_files = static_cast<int>(config.max_session_files);
  options.max_session_disk_bytes = config.max_session_disk_bytes;
  options.max_pulled_pack_bytes = config.max_pulled_pack_bytes;
  options.max_queued = static_cast<int>(config.max_queued);
  options.max_batch = static_cast<int>(config.max_batch);
  options.prefill_chunk_tokens = static_cast<int>(config.prefill_chunk);
  options.assumed_local_prefill_tokens_per_s = config.local_prefill_tps;
  options.packs_dir = config.packs_dir;
  if (!config.api_key_path.empty()) {
    BATON_ASSIGN_OR_RETURN(ApiKeySet keys, ApiKeySet::LoadFile(config.api_key_path));
    options.api_keys = std::make_shared<const ApiKeySet>(std::move(keys));
  }
  if (!config.cloud_address.empty()) {
    CloudClientOptions cloud;
    cloud.address = config.cloud_address;
    cloud.token_path = config.cloud_token_path;
    cloud.ca_path = config.cloud_ca_path;
    cloud.cert_path = config.cloud_cert_path;
    cloud.key_path = config.cloud_key_path;
    cloud.prefill_timeout = config.cloud_timeout;
    cloud.stall_timeout = config.cloud_stall_timeout;
    options.cloud = cloud;
  }
  return options;
}

// Serves until SIGINT / SIGTERM: the listeners start first (Health answers
// LOADING / WARMING), the model loads on a second thread, and a signal
// drains the agent and shuts the server down with a grace period for
// running calls. "listening" is printed once every listener is bound, so a
// taken port or a bad model file ends the start with one line.
int run_edge_agent(const EdgeConfig& config) {
  absl::StatusOr<EdgeServiceOptions> options = service_options(config);
  if (!options.ok()) {
    std::fprintf(stderr, "baton-edge: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  // A model file that does not load (mapped, shapes checked; the weights are
  // read later) ends the start before anything listens.
  if (absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(config.model_path); !model.ok()) {
    std::fprintf(stderr, "baton-edge: --model: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  // The service records every Generate (gRPC and HTTP alike) for /metrics.
  MetricsRegistry registry;
  EdgeMetrics metrics(registry);
  options->metrics = &metrics;
  // Block the signals in every thread; the main thread takes them with sigwait.
  block_shutdown_signals();

  EdgeService service(*options);
  EdgeServerOptions server_options;
  server_options.tls.cert_path = config.tls_cert_path;
  server_options.tls.key_path = config.tls_key_path;
  server_options.loopback_relay_port = !config.http_address.empty();
  absl::StatusOr<std::unique_ptr<EdgeServer>> server =
      EdgeServer::Start(config.listen_address, service, server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "baton-edge: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<HttpFrontEnd> http;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  // What runs stops, last started first, on a failed start and after the drain.
  ShutdownStack listeners;
  int64_t server_grace_ms = 0;  // running calls get 5 s once the agent has drained
  listeners.push([&] { (*server)->Shutdown(server_grace_ms); });

  // --http: the OpenAI-compatible API, relaying to this agent's own gRPC
  // service over its loopback relay port (one code path, two front ends).
  if (!config.http_address.empty()) {
    HttpFrontEndOptions http_options;
    http_options.listen = config.http_address;
    http_options.grpc_target = absl::StrCat("127.0.0.1:", (*server)->relay_port());
    http_options.api_keys = options->api_keys;
    http_options.tls_cert_path = config.tls_cert_path;
    http_options.tls_key_path = config.tls_key_path;
    http_options.model_path = config.model_path;
    http_options.metrics = &registry;
    http_options.record_generate_metrics = false;  // the service records them
    http_options.model_aliases = absl::StrSplit(config.model_aliases, ',', absl::SkipWhitespace());
    http_options.cors_origins = absl::StrSplit(config.cors_origins, ',', absl::SkipWhitespace());
    absl::StatusOr<std::unique_ptr<HttpFrontEnd>> started = HttpFrontEnd::Start(http_options);
    if (!started.ok()) {
      std::fprintf(stderr, "baton-edge: --http: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    http = std::move(*started);
    listeners.push([&] { http->Stop(); });
  }
  // --metrics: Prometheus on its own address; each scrape reads Health first.
  if (!config.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start(config.metrics_address, registry, [&service, &metrics] {
          v1::EdgeHealthResponse health;
          service.fill_health(&health);
          metrics.record_health(health);
        });
    if (!started.ok()) {
      std::fprintf(stderr, "baton-edge: --metrics: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    metrics_server = std::move(*started);
    listeners.push([&] { metrics_server->Stop(); });
  }
  auto host_of = [](const std::string& address) { return address.substr(0, address.rfind(':')); };
  std::fprintf(stderr, "baton-edge: listening on %s:%d (%s, %s)\n", host_of(config.listen_address).c_str(),
               (*server)->port(), config.tls_cert_path.empty() ? "plaintext" : "TLS",
               options->api_keys == nullptr ? "no API keys" : "API keys required");
  if (http) std::fprintf(stderr, "baton-edge: HTTP API on %s:%d\n", host_of(config.http_address).c_str(), http->port());
  if (metrics_server) std::fprintf(stderr, "baton-edge: metrics on port %d\n", metrics_server->port());

  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    absl::Status loaded = service.Load(config.model_path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "baton-edge: %s\n", std::string(loaded.message()).c_str());
      load_failed = true;
      request_shutdown();  // wakes the wait below
    }
  });
  server_grace_ms = 5000;
  serve_until_signal(
      [&](int signal_number) {
        if (!load_failed) std::fprintf(stderr, "baton-edge: signal %d: draining\n", signal_number);
        service.Drain();
      },
      listeners);
  loader.join();
  server->reset();
  return load_failed ? 1 : 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (baton::version_requested(argc, argv)) {
    std::fputs(baton::version_text("baton-edge", std::nullopt).c_str(), stdout);
    return 0;
  }
  baton::EdgeConfig config;
  baton::FlagSet flags("baton-edge", "--model FILE --listen ADDR [flags]",
                       baton::kDescription);
  baton::register_flags(flags, config);
  if (std::optional<int> exit_code = baton::parse_command_line(flags, argc, argv)) {
    return *exit_code;
  }
  // A port alone ("--http 8080") listens on loopback.
  for (std::string* address : {&config.listen_address, &config.http_address, &config.metrics_address}) {
    *address = baton::listen_address_or_loopback(*address);
  }
  if (absl::Status status = baton::validate(flags, config); !status.ok()) {
    std::fprintf(stderr, "baton-edge: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return baton::run_edge_agent(config);
}
