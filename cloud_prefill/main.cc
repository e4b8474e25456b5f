// baton-prefill: the cloud prefill service. This file only parses flags and
// hands the configuration to the service.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/kv_codec/kv_calibration.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/kv_stream/kv_calibration_check.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/util/listen_address.h"
#include "common/util/log.h"
#include "common/util/metrics_http.h"
#include "common/util/read_file.h"
#include "common/util/shutdown.h"
#include "common/util/version.h"
#include "cloud_prefill/prefill_metrics.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/state/redis_client.h"
#ifdef BATON_HAVE_CUDA
#include "cloud_prefill/cuda/cuda_device.h"
#include "cloud_prefill/cuda/cuda_arch_support.h"
#include "cloud_prefill/cuda/cuda_prefill_backend.h"
#endif
#include "cloud_prefill/prefill_service.h"
#include "common/util/flags.h"
#include "common/util/metrics.h"

namespace baton {
namespace {

constexpr char kDescription[] =
    "Serves the Prefill gRPC service: prefills long prompts on this machine's GPU\n"
    "(or CPU), quantizes and compresses the KV cache and streams it to edge agents.\n"
    "Every flag may also be set in the --config file ('name = value' lines).\n"
    "A listening address may be a port alone (loopback). --version prints the version, git commit,\n"
    "build type, SIMD level and CUDA support.";

// Every knob of baton-prefill, with the defaults it serves with.
struct PrefillConfig {
  std::string model_path;               // GGUF, F32/F16/BF16/Q8_0 tensors
  std::string listen_address;           // host:port of the gRPC server
  std::string tls_cert_path;            // PEM; TLS is on when cert and key are set
  std::string tls_key_path;             // PEM
  std::string tls_client_ca_path;       // PEM roots; set: clients need certificates (mutual TLS)
  std::string auth_tokens_path;         // '<token> <tenant>' lines; empty: no auth
  std::string backend = "auto";         // auto | cuda | cpu
  std::string cpu_matmul = "exact";     // exact | bf16: F16/BF16 weights on the CPU backend
  int64_t threads = 0;                  // CPU threads; 0: one per core
  int64_t encode_threads = 0;           // threads encoding one request's blocks; 0: auto
  int64_t max_running = 4;              // requests computing at once
  int64_t max_queued = 64;              // requests waiting; more get RESOURCE_EXHAUSTED
  int64_t max_context_tokens = 0;       // longest prompt; 0: the model's trained context
  int64_t chunk_tokens = 256;           // default tokens per KV block
  std::string default_codec = "int8";   // f16 | int8 | int4, when a request leaves it unset
  int64_t zstd_level = 3;               // default zstd level; 0: no compression
  std::string kv_calibration_path;      // .batoncal of this model: enables the transform codec (tc-*)
  uint64_t prefix_cache_bytes = 8ull << 30;   // prefix cache (KV kept by prefix digest)
  uint64_t session_cache_bytes = 4ull << 30;  // session cache (KV kept per session id)
  uint64_t pack_store_bytes = 2ull << 30;     // prefix packs uploaded with PutPrefix
  uint64_t pack_quota_bytes = 0;              // per tenant; 0: a quarter of the store with 2+ tenants, else all
  int64_t max_pack_calls = 4;                 // GetPrefix calls at once
  std::string pack_dir;                       // packs kept on disk too (no redis state); empty: memory only
  uint64_t memory_limit_bytes = 0;            // reserved by admitted Prefill requests; 0: half the machine's RAM
  std::chrono::milliseconds drain_timeout{30'000};  // DRAINING: wait for running requests
  std::string metrics_address;          // host:port of GET /metrics; empty: off
  std::chrono::milliseconds write_stall_timeout{10'000};  // a stream the client stops reading is cancelled
  std::string state = "memory";         // memory | redis://HOST:PORT[,...] | rediss://...
  std::string state_password_file;      // the Redis password (AUTH); mode 600
  std::string state_tls_ca;             // PEM roots the Redis server's certificate chains to (rediss://)
  std::string state_tls_cert;           // PEM client certificate, when Redis asks for one
  std::string state_tls_key;            // PEM
  std::chrono::milliseconds state_connect_timeout{250};
  std::chrono::milliseconds state_timeout{1000};          // one Redis command
  std::chrono::milliseconds state_ttl{24 * 3600 * 1000};  // of L2 prefix blocks and sessions
};

void register_flags(FlagSet& flags, PrefillConfig& config) {
  flags.add_string("model", &config.model_path, "GGUF model file to serve", "FILE");
  flags.add_string("listen", &config.listen_address, "gRPC address to serve on", "ADDR");
  flags.enable_config_file();
  flags.add_string("tls-cert", &config.tls_cert_path,
                   "TLS certificate chain (PEM); needs --tls-key", "FILE");
  flags.add_string("tls-key", &config.tls_key_path, "TLS private key (PEM)", "FILE");
  flags.add_string("tls-client-ca", &config.tls_client_ca_path,
                   "CA roots (PEM) that client certificates must chain to (mutual TLS)", "FILE");
  flags.add_string("auth-tokens", &config.auth_tokens_path,
                   "bearer tokens, one '<token> <tenant>' per line; empty: no authentication",
                   "FILE");
  flags.add_string("backend", &config.backend, "compute backend: auto, cuda or cpu", "NAME");
  flags.add_string("cpu-matmul", &config.cpu_matmul,
                   "CPU backend, F16/BF16 weights: exact (f32 products) or bf16 (AVX-512 BF16, ~2^-9 relative "
                   "error per product, several times faster; exact where the CPU lacks it)",
                   "MODE");
  flags.add_int64("threads", &config.threads, "CPU threads; 0: one per core");
  flags.add_int64("encode-threads", &config.encode_threads,
                  "threads encoding (quantize + zstd) one request's KV blocks; 0: 1 on the CPU backend, "
                  "min(8, cores) on the CUDA backend");
  flags.add_int64("max-running", &config.max_running, "requests computing at once");
  flags.add_int64("max-queued", &config.max_queued,
                  "requests waiting for a slot; more are refused with a retry hint");
  flags.add_int64("max-context", &config.max_context_tokens,
                  "longest prompt in tokens; 0: the model's trained context");
  flags.add_int64("chunk-tokens", &config.chunk_tokens,
                  "tokens per KV block when a request leaves it unset");
  flags.add_string("codec", &config.default_codec,
                   "KV codec when a request leaves it unset: f16, int8 or int4", "NAME");
  flags.add_int64("zstd-level", &config.zstd_level,
                  "zstd level when a request leaves it unset; 0: no compression");
  flags.add_string("kv-calibration", &config.kv_calibration_path,
                   "KV calibration of the served model (`baton model calibrate`): enables the transform codec "
                   "(tc-*) and is handed to edges that ask (GetKvCalibration)",
                   "FILE");
  flags.add_size("prefix-cache", &config.prefix_cache_bytes,
                 "memory for KV kept by prefix digest");
  flags.add_size("session-cache", &config.session_cache_bytes,
                 "memory for KV kept per session id");
  flags.add_size("pack-store", &config.pack_store_bytes,
                 "memory for prefix packs uploaded with PutPrefix");
  flags.add_size("pack-quota", &config.pack_quota_bytes,
                 "prefix pack bytes each tenant may store; 0: a quarter of --pack-store when --auth-tokens names "
                 "two or more tenants, else all of it");
  flags.add_string("pack-dir", &config.pack_dir,
                   "keep prefix packs in this directory too (one file each), so they survive a restart; not used "
                   "with a redis --state, where redis keeps them",
                   "DIR");
  flags.add_int64("max-pack-calls", &config.max_pack_calls,
                  "GetPrefix downloads at once; more are refused with a retry hint");
  flags.add_size("memory-limit", &config.memory_limit_bytes,
                 "memory that admitted Prefill requests may reserve (KV caches of their prompts); more are refused "
                 "with a retry hint; 0: half of this machine's physical memory");
  flags.add_string("metrics", &config.metrics_address,
                   "address of the Prometheus GET /metrics listener; empty: off", "ADDR");
  flags.add_duration("drain-timeout", &config.drain_timeout,
                     "on shutdown, how long running requests may finish");
  flags.add_duration("write-stall-timeout", &config.write_stall_timeout,
                     "cancel a Prefill or GetPrefix stream whose writes make no progress for this long (a client "
                     "that stopped reading), freeing its slot; 0: never");
  flags.add_string("state", &config.state,
                   "where the state replicas share lives (durable packs, the caches' L2): memory (in-process "
                   "only), redis://HOST:PORT[,HOST:PORT...] (one server or a cluster's seeds) or rediss://... (TLS)", "URL");
  flags.add_string("state-password-file", &config.state_password_file,
                   "file holding the Redis password (AUTH); others, or a group not the process's own, must not "
                   "read it", "FILE");
  flags.add_string("state-tls-ca", &config.state_tls_ca, "CA roots (PEM) of the Redis server's certificate (rediss://)",
                   "FILE");
  flags.add_string("state-tls-cert", &config.state_tls_cert,
                   "client certificate (PEM) for a Redis with tls-auth-clients; needs --state-tls-key", "FILE");
  flags.add_string("state-tls-key", &config.state_tls_key, "client private key (PEM)", "FILE");
  flags.add_duration("state-connect-timeout", &config.state_connect_timeout, "bound on connecting to a Redis node");
  flags.add_duration("state-timeout", &config.state_timeout,
                     "bound on one Redis command (send it, read the whole reply); past it the read is a miss");
  flags.add_duration("state-ttl", &config.state_ttl,
                     "lifetime of the prefix blocks and sessions kept in Redis; 0: until Redis's LRU evicts them");
  flags.require("model");
  flags.require("listen");
}

// --state and its companions: null for memory (in-process only), else a
// Redis client (connected on first use: Redis may start after the cloud).
absl::StatusOr<std::shared_ptr<RedisClient>> make_state_redis(const PrefillConfig& config) {
  if (config.state == "memory") {
    if (!config.state_password_file.empty() || !config.state_tls_ca.empty() || !config.state_tls_cert.empty()) {
      return absl::InvalidArgumentError("--state-password-file and --state-tls-* need --state redis://...");
    }
    return std::shared_ptr<RedisClient>();
  }
  absl::StatusOr<RedisOptions> options = parse_redis_url(config.state);
  if (!options.ok()) return absl::InvalidArgumentError(absl::StrCat("--state: ", options.status().message()));
  if (!config.state_password_file.empty()) {
    absl::StatusOr<std::string> password = read_private_file(config.state_password_file, "--state-password-file");
    if (!password.ok()) return password.status();
    options->password = std::string(absl::StripTrailingAsciiWhitespace(*password));
    if (options->password.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--state-password-file ", config.state_password_file, " is empty"));
    }
  }
  if (!options->tls && (!config.state_tls_ca.empty() || !config.state_tls_cert.empty())) {
    return absl::InvalidArgumentError("--state-tls-ca and --state-tls-cert need a rediss:// URL");
  }
  if (config.state_tls_cert.empty() != config.state_tls_key.empty()) {
    return absl::InvalidArgumentError("--state-tls-cert and --state-tls-key go together; give both");
  }
  options->tls_ca_file = config.state_tls_ca;
  options->tls_cert_file = config.state_tls_cert;
  options->tls_key_file = config.state_tls_key;
  options->connect_timeout = config.state_connect_timeout;
  options->io_timeout = config.state_timeout;
  absl::StatusOr<std::unique_ptr<RedisClient>> client = make_redis_client(std::move(*options));
  if (!client.ok()) return absl::InvalidArgumentError(absl::StrCat("--state: ", client.status().message()));
  return std::shared_ptr<RedisClient>(std::move(*client));
}

absl::Status validate(const FlagSet& flags, const PrefillConfig& config) {
  if (!flags.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags.positional().front(), "'"));
  }
  if (absl::StatusOr<std::pair<std::string, int>> address =
          parse_host_port(config.listen_address);
      !address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", address.status().message()));
  }
  if (!config.metrics_address.empty()) {
    if (absl::StatusOr<std::pair<std::string, int>> address = parse_host_port(config.metrics_address);
        !address.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics: ", address.status().message()));
    }
  }
  if (config.tls_cert_path.empty() != config.tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together; give both");
  }
  if (config.cpu_matmul != "exact" && config.cpu_matmul != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat("--cpu-matmul: '", config.cpu_matmul, "' is not one of exact, bf16"));
  }
  if (config.backend != "auto" && config.backend != "cuda" && config.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", config.backend, "' is not one of auto, cuda, cpu"));
  }
  if (config.default_codec != "f16" && config.default_codec != "int8" &&
      config.default_codec != "int4") {
    return absl::InvalidArgumentError(
        absl::StrCat("--codec: '", config.default_codec, "' is not one of f16, int8, int4"));
  }
  if (config.threads < 0 || config.encode_threads < 0 || config.max_running < 1 || config.max_queued < 0 ||
      config.max_context_tokens < 0 || config.chunk_tokens < 1 || config.write_stall_timeout.count() < 0 ||
      config.max_pack_calls < 1 || config.state_ttl.count() < 0) {
    return absl::InvalidArgumentError(
        "--threads, --encode-threads, --max-queued, --max-context, --write-stall-timeout and --state-ttl must be >= 0; "
        "--max-running, --chunk-tokens and --max-pack-calls >= 1");
  }
  if (config.state_timeout.count() <= 0 || config.state_connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError("--state-timeout and --state-connect-timeout must be > 0");
  }
  if (config.zstd_level < -7 || config.zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("--zstd-level: ", config.zstd_level, " is outside -7..19"));
  }
  return absl::OkStatus();
}

// This machine's physical memory (0 when unknown: no limit).
uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
}

// --backend: CUDA when asked for, or (auto) when a usable GPU is there. A host
// without a GPU is the normal case: one info line, no warning.
absl::Status select_backend(const PrefillConfig& config, PrefillServiceOptions& options) {
  if (config.backend == "cpu") return absl::OkStatus();
#ifdef BATON_HAVE_CUDA
  const cuda::GpuAvailability gpu = cuda::find_gpu();
  absl::StatusOr<PrefillBackendFactory> cuda_factory =
      gpu.device.ok() ? cuda::make_cuda_prefill_backend_factory(cuda::CudaBackendOptions{})
                      : absl::StatusOr<PrefillBackendFactory>(gpu.device.status());
  if (cuda_factory.ok()) {
    options.backend_factory = std::move(*cuda_factory);
    if (config.chunk_tokens == 256) options.chunk_tokens = 4096;  // a GPU wants big GEMMs
    BATON_INFO("CUDA backend on %s, chunks of %d tokens", cuda::describe_gpu(gpu).c_str(), options.chunk_tokens);
    return absl::OkStatus();
  }
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError(absl::StrCat("--backend cuda: ", cuda_factory.status().message()));
  }
  if (gpu.absent) {
    BATON_INFO("CPU backend: no GPU found");
  } else {
    BATON_WARN("CPU backend: the GPU is not usable (%s)", std::string(cuda_factory.status().message()).c_str());
  }
#else
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError("--backend cuda: this build has no CUDA backend (nvcc was not found)");
  }
#endif
  return absl::OkStatus();
}

// Serves until SIGINT / SIGTERM: Health answers while the model loads. Every
// listener is bound, and the model file checked, before "listening" is printed.
int run_prefill_service(const PrefillConfig& config) {
  PrefillServiceOptions options;
  options.threads = static_cast<int>(config.threads);
  options.encode_threads = static_cast<int>(config.encode_threads);
  options.max_running = static_cast<int>(config.max_running);
  options.max_queued = static_cast<int>(config.max_queued);
  options.max_context_tokens = config.max_context_tokens;
  options.chunk_tokens = static_cast<int>(config.chunk_tokens);
  options.default_codec = config.default_codec == "f16"    ? KvCodecConfig::Bits::kF16
                          : config.default_codec == "int4" ? KvCodecConfig::Bits::kInt4
                                                           : KvCodecConfig::Bits::kInt8;
  options.zstd_level = static_cast<int>(config.zstd_level);
  options.cpu_float_matmul = config.cpu_matmul == "bf16" ? FloatMatmul::kBf16 : FloatMatmul::kExact;
  if (absl::Status backend = select_backend(config, options); !backend.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n", std::string(backend.message()).c_str());
    return 1;
  }
  options.prefix_cache_bytes = config.prefix_cache_bytes;
  options.session_cache_bytes = config.session_cache_bytes;
  options.pack_store_bytes = config.pack_store_bytes;
  options.write_stall_timeout = config.write_stall_timeout;
  options.pack_quota_bytes = config.pack_quota_bytes;
  options.max_pack_calls = static_cast<int>(config.max_pack_calls);
  options.pack_dir = config.pack_dir;
  options.memory_limit_bytes = config.memory_limit_bytes > 0 ? config.memory_limit_bytes : physical_memory_bytes() / 2;
  if (!config.auth_tokens_path.empty()) {
    absl::StatusOr<TenantAuth> auth = TenantAuth::FromFile(config.auth_tokens_path);
    if (!auth.ok()) {
      std::fprintf(stderr, "baton-prefill: --auth-tokens: %s\n", std::string(auth.status().message()).c_str());
      return 2;
    }
    options.auth = std::move(*auth);
  }
  absl::StatusOr<std::shared_ptr<RedisClient>> state_redis = make_state_redis(config);
  if (!state_redis.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n", std::string(state_redis.status().message()).c_str());
    return 2;
  }
  options.state_redis = std::move(*state_redis);
  options.state_ttl = std::chrono::duration_cast<std::chrono::seconds>(config.state_ttl);
  // Mapped and its shapes checked (the weights are read later): a bad file
  // ends the start before anything listens.
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(config.model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "baton-prefill: --model: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
#ifdef BATON_HAVE_CUDA
  // The CUDA kernels run llama and qwen2 only: --backend cuda refuses other
  // architectures here, auto falls back to the CPU backend.
  if (options.backend_factory) {
    if (absl::Status arch = cuda::check_cuda_supports_model((*model)->spec()); !arch.ok()) {
      if (config.backend == "cuda") {
        std::fprintf(stderr, "baton-prefill: --backend cuda: %s\n", std::string(arch.message()).c_str());
        return 1;
      }
      BATON_WARN("CPU backend: %s", std::string(arch.message()).c_str());
      options.backend_factory = nullptr;
      options.chunk_tokens = static_cast<int>(config.chunk_tokens);
    }
  }
#endif
  if (!config.kv_calibration_path.empty()) {
    // Checked against the model before anything listens: a calibration of
    // another model would code every block against the wrong basis.
    absl::StatusOr<KvCalibration> calibration = load_kv_calibration(config.kv_calibration_path);
    absl::StatusOr<ModelFingerprint> fingerprint = model_fingerprint(**model);
    absl::Status fits = !calibration.ok()   ? calibration.status()
                        : !fingerprint.ok() ? fingerprint.status()
                                            : check_kv_calibration_model(*calibration, fingerprint->digest,
                                                                         kv_geometry_for((*model)->spec()),
                                                                         "--kv-calibration " + config.kv_calibration_path);
    if (!fits.ok()) {
      std::fprintf(stderr, "baton-prefill: --kv-calibration: %s\n", std::string(fits.message()).c_str());
      return 1;
    }
    options.kv_calibration = std::make_shared<const KvCalibration>(std::move(*calibration));
  }
  model->reset();  // only checked here; service.Load maps it again
  MetricsRegistry metrics;
  PrefillMetrics prefill_metrics(metrics);
  options.job_observer = &prefill_metrics;
  PrefillServerOptions server_options;
  server_options.tls = ServerTlsOptions{config.tls_cert_path, config.tls_key_path, config.tls_client_ca_path};
  PrefillService service(std::move(options));
  absl::StatusOr<std::unique_ptr<PrefillServer>> server =
      PrefillServer::Start(config.listen_address, service, server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<MetricsHttpServer> metrics_server;
  // What runs stops, last started first, on a failed start and after the drain.
  ShutdownStack listeners;
  int64_t server_grace_ms = 0;  // set by the drain: 1 s when it ended idle
  listeners.push([&] { (*server)->Shutdown(server_grace_ms); });
  if (!config.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start(config.metrics_address, metrics);
    if (!started.ok()) {
      std::fprintf(stderr, "baton-prefill: --metrics: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    metrics_server = std::move(*started);
    listeners.push([&] { metrics_server->Stop(); });
  }
  std::fprintf(stderr, "baton-prefill: listening on port %d, loading %s\n", (*server)->port(),
               config.model_path.c_str());
  if (metrics_server) std::fprintf(stderr, "baton-prefill: metrics on port %d\n", metrics_server->port());
  if (absl::Status status = service.Load(config.model_path); !status.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  prefill_metrics.collect_at_scrape(service);
  std::fprintf(stderr, "baton-prefill: READY\n");

  bool idle = false;
  serve_until_signal(
      [&](int signal_number) {
        std::fprintf(stderr, "baton-prefill: signal %d, DRAINING for up to %lld ms (%u running, %u queued)\n",
                     signal_number, static_cast<long long>(config.drain_timeout.count()), service.running(),
                     service.queued());
        // No new work; running and queued streams finish; then the listeners stop.
        service.begin_drain();
        idle = service.wait_idle(config.drain_timeout);
        server_grace_ms = idle ? 1000 : 0;
      },
      listeners);
  std::fprintf(stderr, "baton-prefill: %s\n", idle ? "drained, exiting" : "drain timeout, cancelling what is left");
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  // SIGINT / SIGTERM are taken by serve_until_signal in run_prefill_service; block them
  // before gRPC starts its threads so every thread inherits the mask.
  baton::block_shutdown_signals();
  if (baton::version_requested(argc, argv)) {
#ifdef BATON_HAVE_CUDA
    const std::optional<std::string> gpu = baton::cuda::describe_gpu(baton::cuda::find_gpu());
#else
    const std::optional<std::string> gpu = std::nullopt;  // the CUDA line says: not compiled in
#endif
    std::fputs(baton::version_text("baton-prefill", gpu).c_str(), stdout);
    return 0;
  }
  baton::PrefillConfig config;
  baton::FlagSet flags("baton-prefill", "--model FILE --listen ADDR [flags]",
                       baton::kDescription);
  baton::register_flags(flags, config);
  if (std::optional<int> exit_code = baton::parse_command_line(flags, argc, argv)) {
    return *exit_code;
  }
  // A port alone ("--listen 7070") listens on loopback.
  for (std::string* address : {&config.listen_address, &config.metrics_address}) {
    *address = baton::listen_address_or_loopback(*address);
  }
  if (absl::Status status = baton::validate(flags, config); !status.ok()) {
    std::fprintf(stderr, "baton-prefill: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return baton::run_prefill_service(config);
}
