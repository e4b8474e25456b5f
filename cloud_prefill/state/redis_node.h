// RedisNode: one Redis server as the client sees it: a pool of idle
// connections and its health. A failure that says the node is unreachable or
// hung (UNAVAILABLE, DEADLINE_EXCEEDED, a refused AUTH) puts it "down" for a
// backoff (backoff_initial, doubling per consecutive failure up to
// backoff_max), during which acquire() fails at once with UNAVAILABLE
// instead of waiting for a connect timeout again; after it, one call tries
// again, and a success clears the failures. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/state/redis_client.h"
#include "cloud_prefill/state/redis_connection.h"

namespace baton {

class RedisNode {
 public:
  RedisNode(RedisEndpoint endpoint, const RedisOptions& options, std::shared_ptr<RedisTlsContext> tls,
            std::atomic<uint64_t>* reconnects);

  const RedisEndpoint& endpoint() const { return endpoint_; }
  const std::string& name() const { return name_; }  // "host:port"

  // Runs one command; with `asking`, ASKING first on the same connection
  // (a cluster's ASK redirect). Error replies come back as replies.
  absl::StatusOr<RedisConnectionReply> run(std::span<const std::string_view> argv, bool asking);

  // Down: the last attempt failed and no success came since.
  bool down() const;

 private:
  absl::StatusOr<std::unique_ptr<RedisConnection>> acquire();
  void release(std::unique_ptr<RedisConnection> connection);
  void note_failure(const absl::Status& status);
  void note_success();

  const RedisEndpoint endpoint_;
  const std::string name_;
  const RedisOptions& options_;  // owned by the client, which outlives its nodes
  const std::shared_ptr<RedisTlsContext> tls_;
  std::atomic<uint64_t>* const reconnects_;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;  // guarded by mu_; newest last
  bool opened_once_ = false;                            // guarded by mu_
  int consecutive_failures_ = 0;                        // guarded by mu_
  std::chrono::milliseconds backoff_{0};                // guarded by mu_
  RedisClock::time_point down_until_{};                 // guarded by mu_
  std::string last_error_;                              // guarded by mu_
};

}  // namespace baton
