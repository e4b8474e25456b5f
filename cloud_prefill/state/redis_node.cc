#include "cloud_prefill/state/redis_node.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

// The failures that say the node itself is unreachable, hung or refusing
// us; a reply over the cap or a protocol error only costs the connection.
bool is_node_failure(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsPermissionDenied(status);
}

}  // namespace

RedisNode::RedisNode(RedisEndpoint endpoint, const RedisOptions& options, std::shared_ptr<RedisTlsContext> tls,
                     std::atomic<uint64_t>* reconnects)
    : endpoint_(std::move(endpoint)),
      name_(absl::StrCat(endpoint_.host, ":", endpoint_.port)),
      options_(options),
      tls_(std::move(tls)),
      reconnects_(reconnects) {}

absl::StatusOr<RedisConnectionReply> RedisNode::run(std::span<const std::string_view> argv, bool asking) {
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection = acquire();
  if (!connection.ok()) return connection.status();
  const RedisClock::time_point deadline = RedisClock::now() + options_.io_timeout;
  if (asking) {
    const std::string_view asking_argv[] = {"ASKING"};
    absl::StatusOr<RedisConnectionReply> reply = (*connection)->execute(asking_argv, deadline);
    if (reply.ok() && reply->is_error) {
      release(*std::move(connection));
      return absl::InternalError(absl::StrCat("redis ", name_, " refused ASKING: ", reply->error));
    }
    if (!reply.ok()) {
      if (is_node_failure(reply.status())) note_failure(reply.status());
      return reply.status();
    }
  }
  absl::StatusOr<RedisConnectionReply> reply = (*connection)->execute(argv, deadline);
  if (!reply.ok()) {
    if (is_node_failure(reply.status())) note_failure(reply.status());
    return reply.status();
  }
  note_success();
  release(*std::move(connection));
  return reply;
}

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisNode::acquire() {
  bool reopen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const RedisClock::time_point now = RedisClock::now();
    if (consecutive_failures_ > 0 && now < down_until_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(down_until_ - now);
      return absl::UnavailableError(absl::StrCat("redis ", name_, " is down (retry in ", left.count(),
                                                 " ms, backoff after ", consecutive_failures_,
                                                 " failure(s)); last error: ", last_error_));
    }
    while (!idle_.empty()) {
      std::unique_ptr<RedisConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      if (connection->idle_and_usable()) return connection;
    }
    reopen = opened_once_;
    opened_once_ = true;
  }
  if (reopen) reconnects_->fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
      RedisConnection::open(endpoint_, options_, tls_, RedisClock::now() + options_.connect_timeout);
  if (!connection.ok()) note_failure(connection.status());
  return connection;
}

void RedisNode::release(std::unique_ptr<RedisConnection> connection) {
  if (connection->broken()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(idle_.size()) < options_.max_idle_connections_per_node) idle_.push_back(std::move(connection));
}

void RedisNode::note_failure(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++consecutive_failures_;
  backoff_ = consecutive_failures_ == 1 ? options_.backoff_initial : std::min(backoff_ * 2, options_.backoff_max);
  down_until_ = RedisClock::now() + backoff_;
  last_error_ = std::string(status.message());
  idle_.clear();  // connections of a node that just failed are suspect
}

void RedisNode::note_success() {
  std::lock_guard<std::mutex> lock(mu_);
  consecutive_failures_ = 0;
  backoff_ = std::chrono::milliseconds(0);
}

bool RedisNode::down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consecutive_failures_ > 0;
}

}  // namespace baton
