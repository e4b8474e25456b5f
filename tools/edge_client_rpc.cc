#include "edge_client_rpc.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/flags.h"

namespace baton::cli {
namespace {

constexpr char kRetryAfterKey[] = "baton-retry-after-ms";
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

}  // namespace

absl::StatusOr<RpcTarget> make_rpc_target(const std::string& flag, const std::string& address,
                                          const std::string& what, std::chrono::milliseconds timeout,
                                          const std::string& token_file) {
  if (auto parsed = parse_host_port(address); !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", parsed.status().message()));
  }
  if (timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: ", format_duration(timeout), " is not a positive duration"));
  }
  RpcTarget target;
  target.address = address;
  target.what = what;
  target.timeout = timeout;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return absl::NotFoundError(absl::StrCat("--token-file: cannot read ", token_file));
    std::stringstream buffer;
    buffer << in.rdbuf();
    target.bearer_token = std::string(absl::StripAsciiWhitespace(buffer.str()));
    if (target.bearer_token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token_file, " is empty"));
    }
  }
  return target;
}

std::shared_ptr<grpc::Channel> open_channel(const RpcTarget& target) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  return grpc::CreateCustomChannel(target.address, grpc::InsecureChannelCredentials(), arguments);
}

void prepare_context(const RpcTarget& target, RpcClock::time_point deadline, grpc::ClientContext* context) {
  // gRPC deadlines are system_clock; convert the remaining steady time.
  const auto remaining = std::max(RpcClock::duration::zero(), deadline - RpcClock::now());
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(remaining));
  if (!target.bearer_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + target.bearer_token);
  }
}

std::optional<int64_t> retry_after_ms(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kRetryAfterKey);
  if (it == trailers.end()) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &value) || value < 0) {
    return std::nullopt;
  }
  return value;
}

std::string describe_rpc_error(const RpcTarget& target, const std::string& rpc, const grpc::Status& status) {
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
      return absl::StrCat(server, " refused the credentials (--token-file)", detail);
    default:
      return absl::StrCat(rpc, " at ", target.address, ": ",
                          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), detail);
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
    prepare_context(target, deadline, &context);
    bool started = false;
    grpc::Status status = attempt(context, &started);
    if (status.ok() || started || status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    const std::optional<int64_t> hint = retry_after_ms(context);
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
