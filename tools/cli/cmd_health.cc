// baton health --edge ADDR | --cloud ADDR: one Health call and a readable
// snapshot (state, model, backend, memory plan and cloud link for the agent;
// queue and throughput for the cloud). --wait D polls until the server is
// READY (scripts start a server, then wait on this); --json prints the
// response as one JSON object.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli_defaults.h"
#include "commands.h"
#include "common/rpc/proto_json.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "progress_line.h"
#include "report.h"

namespace baton::cli {
namespace {

constexpr std::chrono::milliseconds kPollInterval{200};

// "baton-tiny-kjv (Q4_0, fingerprint 1151bd48beb93986)": the model's one
// name (GGUF general.name; the file name where it has none); the
// architecture is printed as its own row.
std::string model_text(const v1::ModelFingerprint& model) {
  std::string text = model.name().empty() ? "-" : model.name();
  text += " (";
  if (!model.weights_type().empty()) text += model.weights_type() + ", ";
  return text + "fingerprint " + short_digest(model.digest()) + ")";
}

void print_edge_health(const RpcTarget& target, const v1::EdgeHealthResponse& h) {
  Report r(absl::StrFormat("edge agent %s", target.address));
  r.add_text("state", "state", serving_state_name(h.state()));
  if (h.state() != v1::SERVING_STATE_READY && h.retry_after_ms() > 0) {
    r.add_int("retry_after_ms", "retry after", h.retry_after_ms(), "ms");
  }
  r.add_text("model", "model", model_text(h.model()));
  r.add_text("architecture", "architecture", h.model().architecture());
  r.add_text("backend", "backend", h.backend());
  r.add_measured("local_prefill_tok_per_s", "local prefill", h.local_prefill_tokens_per_s(), "tok/s");
  r.add_measured("decode_tok_per_s", "decode", h.decode_tokens_per_s(), "tok/s");
  r.add_text("load", "running / queued", absl::StrFormat("%d / %d", h.running(), h.queued()));
  r.add_int("sessions", "sessions", h.sessions());
  r.add_int("packs", "packs", h.packs());
  const v1::MemoryPlan& m = h.memory();
  r.add_text("device_limit", "device memory limit", format_bytes(m.device_limit_bytes()));
  r.add_text("weights", "  weights", format_bytes(m.weights_bytes()));
  r.add_text("scratch", "  scratch", format_bytes(m.scratch_bytes()));
  r.add_text("headroom", "  headroom", format_bytes(m.headroom_bytes()));
  r.add_text("kv_budget", "  KV budget", format_bytes(m.kv_budget_bytes()));
  r.add_text("kv_used", "  KV held", format_bytes(m.kv_used_bytes()));
  for (int i = 0; i < m.capacity_size(); ++i) {
    const v1::CodecCapacity& c = m.capacity(i);
    // The first entry is the agent's default codec (--codec).
    r.add_text("capacity", "  max context " + codec_params_name(c.codec()) + (i == 0 ? " (default)" : ""),
               absl::StrFormat("%d tokens (%s/token)", c.max_context_tokens(), format_bytes(c.kv_bytes_per_token())));
  }
  if (!h.default_codec().empty()) r.add_text("default_codec", "codec", h.default_codec());
  if (h.state() != v1::SERVING_STATE_LOADING) {
    r.add_text("kv_calibration", "KV calibration",
               h.kv_calibration_sha256().empty()
                   ? std::string("none held (--kv-calibration, or the cloud's when a turn needs it)")
                   : absl::StrFormat("sha256 %s, quality table of %d codecs", h.kv_calibration_sha256(),
                                     h.kv_quality_rows()));
  }
  const v1::CloudLink& cloud = h.cloud();
  if (cloud.address().empty()) {
    r.add_text("cloud", "cloud", "none (local prefill only)");
  } else {
    r.add_text("cloud", "cloud", absl::StrFormat("%s, %s, %s", cloud.address(),
                                                 cloud.reachable() ? "reachable" : "unreachable",
                                                 serving_state_name(cloud.state())));
    r.add_measured("cloud_rtt_ms", "  round trip", cloud.rtt_ms(), "ms");
    r.add_measured("cloud_call_overhead_ms", "  per-call cost", cloud.call_overhead_ms(), "ms");
    r.add_text("cloud_bandwidth", "  bandwidth", format_rate(cloud.bandwidth_bytes_per_s()));
    r.add_measured("cloud_prefill_tok_per_s", "  cloud prefill", cloud.prefill_tokens_per_s(), "tok/s");
  }
  r.add_text("version", "version", h.version());
  r.print_table(stdout);
}

void print_cloud_health(const RpcTarget& target, const v1::HealthResponse& h) {
  Report r(absl::StrFormat("cloud prefill service %s", target.address));
  r.add_text("state", "state", serving_state_name(h.state()));
  if (h.state() != v1::SERVING_STATE_READY && h.retry_after_ms() > 0) {
    r.add_int("retry_after_ms", "retry after", h.retry_after_ms(), "ms");
  }
  r.add_text("model", "model", model_text(h.model()));
  r.add_text("architecture", "architecture", h.model().architecture());
  r.add_text("backend", "backend", h.backend());
  std::string codecs;
  for (int codec : h.codecs()) {
    v1::CodecParams params;
    params.set_codec(static_cast<v1::KvCodec>(codec));
    codecs += (codecs.empty() ? "" : ", ") + codec_params_name(params);
  }
  r.add_text("codecs", "codecs", codecs);
  r.add_text("kv_calibration_sha256", "KV calibration (tc)",
             h.kv_calibration_sha256().empty() ? "none" : h.kv_calibration_sha256());
  r.add_text("load", "running / queued", absl::StrFormat("%d / %d", h.running(), h.queued()));
  r.add_measured("prefill_tok_per_s", "prefill", h.prefill_tokens_per_s(), "tok/s");
  r.add_int("max_context_tokens", "max context", h.max_context_tokens(), "tokens");
  if (h.has_state_tier()) {
    // "memory", or "redis, healthy (single node, ...)" / "redis, degraded (...)".
    const v1::StateTier& tier = h.state_tier();
    std::string text = tier.kind();
    if (tier.kind() != "memory") absl::StrAppend(&text, tier.healthy() ? ", healthy" : ", degraded");
    if (!tier.detail().empty()) absl::StrAppend(&text, " (", tier.detail(), ")");
    r.add_text("state_tier", "state tier", text);
  }
  r.add("uptime_s", "uptime", h.uptime_ms() / 1e3, "s", 1);
  r.add_text("version", "version", h.version());
  r.print_table(stdout);
}

// Calls `health` until it answers READY or the wait is over; without a wait,
// once. Returns the last status; *ready tells whether READY was seen.
template <typename Response, typename Call>
grpc::Status poll_health(const Call& health, std::chrono::milliseconds wait, Response* response, bool* ready) {
  const auto give_up = RpcClock::now() + wait;
  while (true) {
    *response = Response();
    grpc::Status status = health(response);
    *ready = status.ok() && response->state() == v1::SERVING_STATE_READY;
    if (*ready || wait.count() == 0 || RpcClock::now() + kPollInterval >= give_up) return status;
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

absl::Status health_command(const Args& args) {
  std::string edge, cloud;
  ChannelSecurityOptions edge_security, cloud_security;
  bool json = false, require_ready = false;
  std::chrono::milliseconds timeout{10'000}, wait{0};
  FlagSet flags("baton health", "[--edge ADDR | --cloud ADDR] [flags]",
                "Asks an edge agent or the cloud prefill service for its state and prints it. "
                "Exit code 0 when the server answered (with --wait or --ready: when it is READY), 1 "
                "otherwise, so probes and scripts can use it.");
  add_edge_address_flag(flags, &edge);
  add_cloud_address_flag(flags, &cloud, "ask the cloud prefill service instead of the edge agent");
  add_edge_channel_flags(flags, &edge_security);
  add_cloud_channel_flags(flags, &cloud_security);
  flags.add_duration("wait", &wait, "poll until the server is READY, at most this long (0: one call)");
  flags.add_bool("ready", &require_ready, "exit 1 unless the server is READY (readiness probes)");
  flags.add_duration("timeout", &timeout, "deadline of one Health call");
  flags.add_bool("json", &json, "print the response as one JSON object");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  // The edge agent unless --cloud is given (both have default addresses).
  if ((flags.is_set("edge") && flags.is_set("cloud")) || !flags.positional().empty()) {
    return usage_error("health", "give one of --edge ADDR, --cloud ADDR");
  }
  const bool is_edge = !flags.is_set("cloud");
  absl::StatusOr<RpcTarget> target =
      is_edge ? make_rpc_target("edge", edge, "edge agent", timeout, edge_security)
              : make_rpc_target("cloud", cloud, "cloud prefill service", timeout, cloud_security);
  if (!target.ok()) return target_error("health", target.status());
  bool ready = false;
  if (is_edge) {
    EdgeClient client(*target);
    v1::EdgeHealthResponse response;
    grpc::Status status = poll_health(
        [&](v1::EdgeHealthResponse* r) { return client.health(r); }, wait, &response, &ready);
    if (!status.ok()) return absl::UnavailableError(client.describe("Health", status));
    json ? (void)std::printf("%s\n", proto_to_json(response).c_str()) : print_edge_health(*target, response);
  } else {
    auto stub = v1::Prefill::NewStub(open_channel(*target));
    v1::HealthResponse response;
    grpc::Status status = poll_health(
        [&](v1::HealthResponse* r) {
          grpc::ClientContext context;
          prepare_call(context, deadline_after(*target), target->bearer_token);
          return stub->Health(&context, v1::HealthRequest(), r);
        },
        wait, &response, &ready);
    if (!status.ok()) return absl::UnavailableError(describe_rpc_error(*target, "Health", status));
    json ? (void)std::printf("%s\n", proto_to_json(response).c_str()) : print_cloud_health(*target, response);
  }
  if (require_ready && !ready && wait.count() == 0) {
    return absl::UnavailableError(absl::StrFormat("the server at %s is not READY", target->address));
  }
  if (wait.count() > 0 && !ready) {
    return absl::DeadlineExceededError(absl::StrFormat("the server at %s is not READY after %s (--wait)",
                                                       target->address, format_duration(wait)));
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
