// Real redis-server processes for tests of the shared state tier (issue 19).
//
// RedisServer::start() runs one redis-server on a free 127.0.0.1 port in a
// fresh temp dir (appendonly yes, appendfsync always: a killed and restarted
// server keeps every key it acknowledged), waits until it answers PING, and
// on destruction kills it and removes the dir. kill() / restart() stop it
// with SIGKILL and start it again on the SAME port and dir.
// RedisTestCluster::start() makes a Redis Cluster of N such servers
// (cluster-enabled, `redis-cli --cluster create ... --cluster-replicas 0`)
// and waits for cluster_state:ok on every node.
//
// When redis-server cannot run here (not installed, redis-cli or openssl
// missing, or the server exits at startup: the message says which and
// quotes its log), start() returns FAILED_PRECONDITION; tests then skip with
// that message through BATON_REDIS_OR_SKIP (which fails instead when
// BATON_REQUIRE_REDIS=1, as CI sets it where Redis is installed). Any other
// error (a server that starts but never answers) is a test failure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/state/redis_client.h"

namespace baton::testing {

struct RedisServerOptions {
  std::string password;           // requirepass; empty: none
  bool tls = false;               // TLS only (no plain port), certificate test_pki().server
  bool tls_auth_clients = false;  // with tls: clients must present test_pki().client
  // With tls: the server's certificate and key instead of test_pki().server
  // (self-signed: client_options() then trusts it as the CA).
  std::string tls_cert_file, tls_key_file;
  bool cluster = false;           // cluster-enabled yes (RedisTestCluster sets it)
  uint64_t maxmemory_bytes = 0;   // > 0: maxmemory, with maxmemory-policy allkeys-lru
  bool enable_debug_command = false;     // DEBUG (e.g. DEBUG SLEEP) from loopback clients
  std::vector<std::string> extra_config;  // more redis.conf lines
};

class RedisServer {
 public:
  static absl::StatusOr<std::unique_ptr<RedisServer>> start(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  // "redis://127.0.0.1:PORT", or "rediss://..." with tls.
  std::string url() const;
  // What a RedisClient needs to reach it: the endpoint, the password, with
  // tls the CA (test_pki().server.cert) and, with tls_auth_clients, the
  // client certificate. Short timeouts and backoff, for tests.
  RedisOptions client_options() const;
  const std::string& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // SIGKILL, reaped; the data stays in dir().
  absl::Status kill();
  // Starts it again (after kill(), or kills it first) on the same port and
  // dir, and waits until it answers PING.
  absl::Status restart();
  // Runs `redis-cli` against this server (with its password and TLS
  // settings) with `args`; its stdout and stderr. An error when it exits
  // non-zero.
  absl::StatusOr<std::string> cli(const std::vector<std::string>& args) const;
  // The last lines of the server's log (for failure messages).
  std::string log_tail() const;

 private:
  RedisServer(RedisServerOptions options, std::string dir, int port);
  absl::Status write_config() const;
  absl::Status spawn_and_wait();
  std::vector<std::string> cli_connection_args() const;

  RedisServerOptions options_;
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

class RedisTestCluster {
 public:
  // `nodes` masters (3 by default), no replicas; `options.cluster` is set.
  static absl::StatusOr<std::unique_ptr<RedisTestCluster>> start(int nodes = 3, RedisServerOptions options = {});

  int size() const { return static_cast<int>(nodes_.size()); }
  RedisServer& node(int index) { return *nodes_[index]; }
  // "redis://127.0.0.1:P1,127.0.0.1:P2,..."
  std::string url() const;
  // Every node as a seed, plus RedisServer::client_options()'s settings.
  RedisOptions client_options() const;
  // `redis-cli -c` (follows redirects) against node 0.
  absl::StatusOr<std::string> cli(const std::vector<std::string>& args) const;
  // Waits until every node reports cluster_state:ok (after start or a change).
  absl::Status wait_until_ok() const;

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// BATON_REQUIRE_REDIS=1 in the environment: a missing Redis fails the tests
// instead of skipping them.
bool redis_required();

}  // namespace baton::testing

// In a TEST body: `auto server = RedisServer::start(); BATON_REDIS_OR_SKIP(server);`
// skips the test with the fixture's message when Redis cannot run here
// (FAILED_PRECONDITION; fails instead under BATON_REQUIRE_REDIS=1), and
// fails it on any other error.
#define BATON_REDIS_OR_SKIP(started)                                                                   \
  do {                                                                                                 \
    if (!(started).ok()) {                                                                             \
      if (absl::IsFailedPrecondition((started).status()) && !::baton::testing::redis_required()) {    \
        GTEST_SKIP() << "no redis-server here: " << (started).status().message();                     \
      }                                                                                                \
      FAIL() << "redis fixture failed: " << (started).status();                                        \
    }                                                                                                  \
  } while (0)
