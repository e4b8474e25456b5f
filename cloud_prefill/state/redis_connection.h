// RedisConnection: one connection to one Redis node, used by one thread at a
// time (RedisClient pools them per node). The transport is a non-blocking
// socket driven by poll() against a deadline, optionally wrapped in TLS
// (OpenSSL); RESP comes from hiredis (redisFormatCommandArgv to write a
// command, a redisReader to parse the reply). A connection that failed in
// any way mid-command (IO error, timeout, reply over the cap, a protocol
// error) is broken(): its stream position is unknown, so it is never reused.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/state/redis_client.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct redisReader redisReader;

namespace baton {

using RedisClock = std::chrono::steady_clock;

// Debian's Abseil has its own string_view, not std's: the Redis code speaks
// std::string_view and converts at Abseil calls.
inline absl::string_view av(std::string_view text) { return absl::string_view(text.data(), text.size()); }

// What one command got back: a reply, or the server's error reply text
// ("MOVED 3999 127.0.0.1:6381", "ERR wrong number of arguments ..."), which
// the client needs to see to follow redirects.
struct RedisConnectionReply {
  RedisReply reply;
  bool is_error = false;
  std::string error;  // is_error: the error reply's text, without the leading '-'
};

// The TLS settings shared by every connection of one client (one SSL_CTX).
class RedisTlsContext {
 public:
  // Loads the CA bundle (required: the server must chain to it) and the
  // optional client certificate and key. INVALID_ARGUMENT naming the file.
  static absl::StatusOr<std::shared_ptr<RedisTlsContext>> create(const RedisOptions& options);
  ~RedisTlsContext();
  SSL_CTX* get() const { return ctx_; }

 private:
  explicit RedisTlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

// What the reader's array hook checks (the reader's privdata): an array
// header alone ("*2000000000\r\n") would make hiredis allocate its element
// table before a single element arrived.
struct RedisReaderLimits {
  uint64_t max_elements = 0;
  bool refused = false;  // set by the hook: the reader's "Out of memory" was this
};

class RedisConnection {
 public:
  // Connects (TCP, then the TLS handshake with certificate and host name
  // checks when `tls` is set) before `connect_deadline`, then sends AUTH
  // when a password is set. UNAVAILABLE on a connect/TLS failure,
  // DEADLINE_EXCEEDED past the deadline, PERMISSION_DENIED when the server
  // refuses the credentials.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> open(const RedisEndpoint& endpoint,
                                                               const RedisOptions& options,
                                                               const std::shared_ptr<RedisTlsContext>& tls,
                                                               RedisClock::time_point connect_deadline);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Writes one command and reads its whole reply before `deadline`, reading
  // at most max_reply_bytes of reply (RESOURCE_EXHAUSTED past that).
  absl::StatusOr<RedisConnectionReply> execute(std::span<const std::string_view> argv,
                                               RedisClock::time_point deadline);

  // A failed command left the stream in an unknown state: drop it.
  bool broken() const { return broken_; }
  // An idle pooled connection the server closed (or sent something
  // unasked) reads as readable: not reusable.
  bool idle_and_usable() const;

 private:
  RedisConnection(int fd, std::string peer, uint64_t max_reply_bytes);
  absl::Status handshake_tls(SSL_CTX* ctx, const std::string& host, RedisClock::time_point deadline);
  absl::Status authenticate(const RedisOptions& options, RedisClock::time_point deadline);
  absl::Status write_all(std::string_view bytes, RedisClock::time_point deadline);
  // Reads some bytes into `buffer` (at least one); 0 never: EOF is an error.
  absl::StatusOr<size_t> read_some(char* buffer, size_t capacity, RedisClock::time_point deadline);
  absl::StatusOr<RedisConnectionReply> read_reply(RedisClock::time_point deadline);
  // Waits until the socket is readable (`for_read`) or writable.
  absl::Status wait(bool for_read, RedisClock::time_point deadline, std::string_view what);
  absl::Status fail(absl::Status status);

  int fd_;
  SSL* ssl_ = nullptr;
  redisReader* reader_ = nullptr;
  RedisReaderLimits reader_limits_;
  std::string peer_;  // "host:port", for messages
  uint64_t max_reply_bytes_;
  bool broken_ = false;
};

}  // namespace baton
