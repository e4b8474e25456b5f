#include "edge_client_rpc.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc/grpc_status.h"
#include "common/util/flags.h"

namespace baton::cli {
namespace {

constexpr std::chrono::milliseconds kMaxBackoff{5'000};
// KV blocks are bounded well under 4 MiB; leave room for a stream message
// around the biggest block a server may send.
constexpr int kMaxReceiveBytes = 64 << 20;

bool looks_unreachable(const grpc::Status& status) {
  // Connection-level failures come from the client library, whose messages
  // start like these; a server's own UNAVAILABLE (for example the agent's
  // cloud being down, which may quote such a message) starts otherwise.
  const std::string& message = status.error_message();
  for (const char* prefix : {"failed to connect", "Connection refused", "connections to all backends failing",
                             "DNS resolution failed", "Socket closed", "Connection reset"}) {
    if (message.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// A gRPC client pointed at the wrong kind of server: the other baton
// service (its own services answer, ours is UNIMPLEMENTED) or an HTTP/1.1
// port (the edge's --http: gRPC's handshake fails with this message).
std::optional<std::string> wrong_server(const RpcTarget& target, const grpc::Status& status) {
  const bool want_edge = target.what == "edge agent";
  if (status.error_message().find("Trying to connect an http1.x server") != std::string::npos) {
    return want_edge ? absl::StrCat(target.address,
                                    " answers HTTP/1.1: that is the edge's --http port; --edge takes its gRPC "
                                    "--listen address")
                     : absl::StrCat(target.address,
                                    " answers HTTP/1.1 (an edge's --http port?); --cloud takes baton-prefill's gRPC "
                                    "--listen address");
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && status.error_message().empty()) {
    return want_edge ? absl::StrCat(target.address,
                                    " is a baton-prefill (cloud) service, not an edge agent: use --cloud for pack "
                                    "commands or point --edge at baton-edge's --listen")
                     : absl::StrCat(target.address,
                                    " is not a baton-prefill (cloud) service (an edge agent?): point --cloud at "
                                    "baton-prefill's --listen");
  }
  return std::nullopt;
}

}  // namespace

void add_edge_channel_flags(FlagSet& flags, ChannelSecurityOptions* security) {
  security->ca_flag = "--ca";
  security->token_flag = "--api-key-file";
  if (const char* from_env = std::getenv("BATON_API_KEY_FILE"); from_env != nullptr) {
    security->token_path = from_env;
  }
  flags.add_string("ca", &security->ca_path, "CA roots (PEM) for TLS to the edge agent; empty: plaintext", "FILE");
  flags.add_string("api-key-file", &security->token_path,
                   "file whose first key (non-'#' line) is sent to the edge agent as 'authorization: Bearer KEY'; "
                   "default $BATON_API_KEY_FILE",
                   "FILE");
}

void add_cloud_channel_flags(FlagSet& flags, ChannelSecurityOptions* security) {
  flags.add_string("cloud-ca", &security->ca_path, "CA roots (PEM) for TLS to the cloud; empty: plaintext", "FILE");
  flags.add_string("cloud-cert", &security->cert_path,
                   "client certificate chain (PEM) for a cloud that requires mutual TLS; with --cloud-key", "FILE");
  flags.add_string("cloud-key", &security->key_path, "private key (PEM) of --cloud-cert", "FILE");
  flags.add_string("cloud-token-file", &security->token_path, "bearer token for the cloud", "FILE");
  flags.add_string("token-file", &security->token_path, "the same as --cloud-token-file", "FILE");
}

absl::StatusOr<RpcTarget> make_rpc_target(const std::string& flag, const std::string& address,
                                          const std::string& what, std::chrono::milliseconds timeout,
                                          const ChannelSecurityOptions& security) {
  if (auto parsed = parse_host_port(address); !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", parsed.status().message()));
  }
  if (timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: ", format_duration(timeout), " is not a positive duration"));
  }
  absl::StatusOr<ChannelSecurity> channel_security = make_channel_security(security);
  if (!channel_security.ok()) return channel_security.status();
  RpcTarget target;
  target.address = address;
  target.what = what;
  target.timeout = timeout;
  target.bearer_token = channel_security->bearer_token;
  target.credentials = channel_security->credentials;
  target.credential_flags = absl::StrCat(security.token_flag, ", ", security.ca_flag);
  return target;
}

std::shared_ptr<grpc::Channel> open_channel(const RpcTarget& target) {
  return baton::open_channel(target.address, target.credentials, {.max_receive_bytes = kMaxReceiveBytes});
}

std::string describe_rpc_error(const RpcTarget& target, const std::string& rpc, const grpc::Status& status) {
  if (std::optional<std::string> wrong = wrong_server(target, status)) return *wrong;
  const std::string server = absl::StrCat("the ", target.what, " at ", target.address);
  // ": message" when the server sent one.
  const std::string detail = status.error_message().empty() ? "" : ": " + status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (looks_unreachable(status)) {
        return absl::StrCat("cannot reach ", server, " (is it running?)", detail);
      }
      return absl::StrCat(server, " is unavailable", detail);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // gRPC's own message means our deadline passed; any other came from
      // the server (a deadline of its own, e.g. the agent's cloud call).
      if (status.error_message().empty() || status.error_message() == "Deadline Exceeded") {
        return absl::StrCat(server, " did not finish ", rpc, " within ", format_duration(target.timeout),
                            " (--timeout)");
      }
      return absl::StrCat(rpc, " at ", target.address, ": DEADLINE_EXCEEDED", detail);
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::StrCat(server, " does not implement ", rpc, detail);
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::StrCat(server, " refused the credentials (", target.credential_flags, ")", detail);
    default:
      return absl::StrCat(rpc, " at ", target.address, ": ",
                          absl::StatusCodeToString(from_grpc_status(status).code()), detail);
  }
}

std::chrono::milliseconds RetryBackoff::next_delay(std::optional<int64_t> server_hint_ms) {
  ++attempts_;
  std::chrono::milliseconds delay = delay_;
  if (server_hint_ms) delay = std::max(delay, std::chrono::milliseconds(*server_hint_ms));
  delay_ = std::min(kMaxBackoff, delay_ * 2);
  return delay;
}

grpc::Status call_with_retry(const RpcTarget& target, RpcClock::time_point deadline, const RpcAttempt& attempt,
                             int* retries) {
  RetryBackoff backoff;
  while (true) {
    grpc::ClientContext context;
    prepare_call(context, deadline, target.bearer_token);
    bool started = false;
    grpc::Status status = attempt(context, &started);
    if (status.ok() || started || status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    const std::optional<int64_t> hint = trailing_retry_after_ms(context);
    if (!hint) return status;  // nobody answered, or a failure that waiting does not fix
    const std::chrono::milliseconds delay = backoff.next_delay(hint);
    if (RpcClock::now() + delay >= deadline) return status;
    std::fprintf(stderr, "baton: model is warming up, retrying in %.1f s (%s at %s: %s)\n", delay.count() / 1e3,
                 target.what.c_str(), target.address.c_str(), status.error_message().c_str());
    if (retries != nullptr) ++*retries;
    std::this_thread::sleep_for(delay);
  }
}

}  // namespace baton::cli
