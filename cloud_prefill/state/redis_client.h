// RedisClient: a blocking, thread-safe client of a Redis server or a Redis
// Cluster, for the cloud's shared state tier (issue 19). Redis itself is the
// distributed engine; this is only its client: the RESP protocol is hiredis's
// (redisReader to parse replies, redisFormatCommandArgv to format commands,
// Debian's libhiredis 0.14), while the transport is ours so that it can be
// bounded and secured: plain TCP or TLS (OpenSSL; hiredis 0.14 has no TLS),
// a deadline on every connect and every command, AUTH from a password, and
// a cap on the bytes of one reply checked while it is read (a hostile or
// corrupted server cannot make us allocate more than max_reply_bytes).
//
// Cluster: the first seed that answers CLUSTER SLOTS gives the slot map
// (a server with cluster support disabled means a single node); a key goes
// to the node owning CRC16(hash tag or key) mod 16384; -MOVED refreshes the
// map and retries there, -ASK sends ASKING then the command to the named node,
// at most max_redirects times.
//
// Failure: a connection that fails or times out is dropped; the node is then
// "down" for a backoff (backoff_initial doubling to backoff_max), during which
// calls routed to it fail at once with UNAVAILABLE instead of waiting again,
// so a dead tier costs callers nothing but a miss. Errors: UNAVAILABLE
// (connect/IO/TLS failure, node in backoff), DEADLINE_EXCEEDED (a timeout),
// RESOURCE_EXHAUSTED (a reply over max_reply_bytes, counted in wire bytes;
// only that connection is dropped, the node stays up), PERMISSION_DENIED
// (AUTH refused, or NOAUTH/NOPERM from the server), INTERNAL (an error reply
// of the server, with its text), INVALID_ARGUMENT (bad options).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
};

struct RedisOptions {
  // One endpoint: a single server, or one node of a cluster (found out by
  // CLUSTER SLOTS); several: seeds of one cluster.
  std::vector<RedisEndpoint> seeds;
  std::string username;  // ACL user for AUTH; empty: AUTH with the password only
  std::string password;  // empty: no AUTH
  bool tls = false;      // rediss://
  std::string tls_ca_file;    // CA bundle the server's certificate must chain to (tls)
  std::string tls_cert_file;  // client certificate, when the server asks for one (tls-auth-clients)
  std::string tls_key_file;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds io_timeout{1000};  // one command: write it and read the whole reply
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  uint64_t max_reply_bytes = uint64_t{512} << 20;  // Redis's own proto-max-bulk-len
  int max_redirects = 5;
  int max_idle_connections_per_node = 4;
};

// "redis://HOST:PORT[,HOST:PORT...]" (plain) or "rediss://..." (TLS); an
// optional "USER@" before the first host. INVALID_ARGUMENT naming the part
// that is wrong. Credentials never come in the URL's password part (they
// come from a file: --state-password-file).
absl::StatusOr<RedisOptions> parse_redis_url(std::string_view url);

// A reply. Error replies never get here: they are INTERNAL statuses.
struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray };
  Type type = Type::kNil;
  std::string str;                 // kString (bulk), kStatus (simple string)
  int64_t integer = 0;             // kInteger
  std::vector<RedisReply> elements;  // kArray
};

struct RedisClientStats {
  bool cluster = false;        // a cluster's slot map is in use
  int nodes = 0;               // nodes in use: the server, or the cluster's slot owners (the seeds before first contact)
  int nodes_down = 0;          // of those, nodes down now (see healthy())
  uint64_t commands = 0;       // sent, total
  uint64_t errors = 0;         // calls that failed (any cause), total
  uint64_t redirects = 0;      // MOVED + ASK followed, total
  uint64_t reconnects = 0;     // connections opened after the first one of a node (pool growth too)
  std::string last_error;      // empty when none yet
};

class RedisClient {
 public:
  virtual ~RedisClient() = default;

  // Runs one command (argv[0] is its name) on the node owning `key` (a
  // keyless command: empty key, any node). Binary-safe.
  virtual absl::StatusOr<RedisReply> command(std::string_view key, std::span<const std::string_view> argv) = 0;

  // Conveniences over command():
  // GET: nullopt when the key does not exist.
  absl::StatusOr<std::optional<std::string>> get(std::string_view key);
  // SET, with PX ttl when ttl > 0; with only_if_absent (NX) false when the key existed.
  absl::StatusOr<bool> set(std::string_view key, std::string_view value,
                           std::chrono::milliseconds ttl = std::chrono::milliseconds(0),
                           bool only_if_absent = false);
  // DEL: whether the key existed.
  absl::StatusOr<bool> del(std::string_view key);
  absl::StatusOr<int64_t> incr_by(std::string_view key, int64_t delta);

  // True when no node in use is down: none whose last attempt failed
  // without a success since (the tier is believed up). A node stays down
  // past its backoff until a call to it succeeds; a dead seed that the
  // cluster's slot map does not use does not count.
  virtual bool healthy() const = 0;
  virtual RedisClientStats stats() const = 0;
};

// Does not need a server up: connections are opened on first use and
// reopened after failures (the tier may start after the cloud).
absl::StatusOr<std::unique_ptr<RedisClient>> make_redis_client(RedisOptions options);

// The cluster slot of a key (CRC16-XMODEM of its hash tag, mod 16384).
int redis_key_slot(std::string_view key);

}  // namespace baton
