// What every gRPC call of the `baton` CLI shares: the target (address,
// deadline, bearer token), the channel, the one-line error messages, and the
// retry loop for servers that are still warming up.
//
// Retry rule: a call that fails with UNAVAILABLE *and* carries the server's
// baton-retry-after-ms trailing metadata (the server answered: it is LOADING
// or WARMING, or its queue is full) is retried with exponential backoff,
// waiting at least the server's hint, until the call's overall deadline.
// UNAVAILABLE without the hint (nothing listening, the agent's cloud
// unreachable) fails at once: an unreachable agent is one clear line, not a
// silent wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/rpc/channel_options.h"

namespace baton {
class FlagSet;
}

namespace baton::cli {

using RpcClock = std::chrono::steady_clock;

// One server the CLI talks to.
struct RpcTarget {
  std::string address;                        // host:port
  std::string what = "edge agent";            // names the server in messages
  std::chrono::milliseconds timeout{30'000};  // deadline of a whole command's calls, retries included
  std::string bearer_token;                   // sent as "authorization: Bearer ..."; empty: none
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure; null: insecure
  std::string credential_flags = "--token-file";          // named when the server refuses the credentials
};

// The channel flags of a command that talks to an edge agent: --ca FILE
// (TLS roots) and --api-key-file FILE (its first key is sent; default
// $BATON_API_KEY_FILE).
void add_edge_channel_flags(FlagSet& flags, ChannelSecurityOptions* security);
// ... to the cloud: --cloud-ca, --cloud-cert, --cloud-key and
// --cloud-token-file (also --token-file), as baton-edge has them.
void add_cloud_channel_flags(FlagSet& flags, ChannelSecurityOptions* security);

// Checks `address` (host:port) and reads the files of `security` (TLS roots,
// client certificate, token). Errors name the flag and the value.
absl::StatusOr<RpcTarget> make_rpc_target(const std::string& flag, const std::string& address,
                                          const std::string& what, std::chrono::milliseconds timeout,
                                          const ChannelSecurityOptions& security = {});

// A channel to the target (TLS when its credentials say so) with receive
// limits large enough for KV blocks. (Inside baton::cli this name hides
// baton::open_channel, which it calls.)
std::shared_ptr<grpc::Channel> open_channel(const RpcTarget& target);

// One line for a failed call: "cannot reach the edge agent at ADDR (...)",
// "the edge agent at ADDR did not answer within 30s (--timeout)", or
// "RPC: CODE: server message".
std::string describe_rpc_error(const RpcTarget& target, const std::string& rpc, const grpc::Status& status);

// Exponential backoff: 250 ms, doubling, at most 5 s; never below the
// server's hint.
class RetryBackoff {
 public:
  std::chrono::milliseconds next_delay(std::optional<int64_t> server_hint_ms);
  int attempts() const { return attempts_; }

 private:
  std::chrono::milliseconds delay_{250};
  int attempts_ = 0;
};

// One attempt of a call: fills the context it is given, returns the status,
// and sets *started when the server already sent data (a stream that began
// must not be replayed).
using RpcAttempt = std::function<grpc::Status(grpc::ClientContext& context, bool* started)>;

// Runs `attempt` with fresh contexts until it succeeds, fails for another
// reason than warming up, or `deadline` would pass before the next try. Each
// wait is announced on stderr ("the edge agent at ADDR: model is warming up
// (LOADING), retrying in 1.0 s"). `retries` (optional) counts the retries.
grpc::Status call_with_retry(const RpcTarget& target, RpcClock::time_point deadline, const RpcAttempt& attempt,
                             int* retries = nullptr);

// The deadline of a command that starts now.
inline RpcClock::time_point deadline_after(const RpcTarget& target) { return RpcClock::now() + target.timeout; }

}  // namespace baton::cli
