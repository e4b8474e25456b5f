#include "cloud_prefill/state/redis_connection.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/check.h"

namespace baton {
namespace {

constexpr size_t kReadChunkBytes = 64 * 1024;

// The newest OpenSSL error of this thread, as text ("" when none).
std::string openssl_error_text() {
  std::string text;
  while (unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    text = buffer;
  }
  return text;
}

// OpenSSL's socket BIO writes with write(2), so a peer that reset the
// connection would raise SIGPIPE and end the process. This BIO is the socket
// BIO with send(MSG_NOSIGNAL) for writes: a reset is an error of the call.
int send_without_sigpipe(BIO* bio, const char* data, int length) {
  const int fd = static_cast<int>(BIO_get_fd(bio, nullptr));
  const ssize_t sent = ::send(fd, data, static_cast<size_t>(length), MSG_NOSIGNAL);
  BIO_clear_retry_flags(bio);
  if (sent < 0 && BIO_sock_should_retry(static_cast<int>(sent))) BIO_set_retry_write(bio);
  return static_cast<int>(sent);
}

const BIO_METHOD* socket_bio_without_sigpipe() {
  static const BIO_METHOD* method = [] {
    const BIO_METHOD* socket = BIO_s_socket();
    BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                    "redis socket (MSG_NOSIGNAL)");
    BIO_meth_set_write(made, send_without_sigpipe);
    BIO_meth_set_read(made, BIO_meth_get_read(socket));
    BIO_meth_set_puts(made, BIO_meth_get_puts(socket));
    BIO_meth_set_ctrl(made, BIO_meth_get_ctrl(socket));
    BIO_meth_set_create(made, BIO_meth_get_create(socket));
    BIO_meth_set_destroy(made, BIO_meth_get_destroy(socket));
    return made;  // never freed: one per process
  }();
  return method;
}

// hiredis's own reply functions, with createArray refusing a table larger
// than the reply cap allows: every element takes at least 3 bytes on the
// wire ("+\r\n"), so more than max_reply_bytes / 3 of them cannot be a reply
// we would accept anyway.
struct CappedReplyFunctions {
  redisReplyObjectFunctions functions{};
  void* (*default_create_array)(const redisReadTask*, int) = nullptr;
};

const CappedReplyFunctions& capped_reply_functions() {
  static const CappedReplyFunctions* made = [] {
    auto* capped = new CappedReplyFunctions;  // never freed: one per process
    redisReader* reader = redisReaderCreate();
    BATON_CHECK(reader != nullptr, "redisReaderCreate failed");
    capped->functions = *reader->fn;
    capped->default_create_array = reader->fn->createArray;
    redisReaderFree(reader);
    capped->functions.createArray = [](const redisReadTask* task, int elements) -> void* {
      auto* limits = static_cast<RedisReaderLimits*>(task->privdata);
      if (limits != nullptr && static_cast<uint64_t>(elements) > limits->max_elements) {
        limits->refused = true;
        return nullptr;  // the reader fails with "Out of memory"; refused says why
      }
      return capped_reply_functions().default_create_array(task, elements);
    };
    return capped;
  }();
  return *made;
}

bool is_ip_literal(const std::string& host) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), address) == 1 || inet_pton(AF_INET6, host.c_str(), address) == 1;
}

// hiredis's reply tree as ours. A nested error (inside an array, as EXEC
// or a script may return) makes the whole reply an error: the callers
// never send such commands, and an error is never silently a value.
void convert_reply(const redisReply& from, RedisConnectionReply* top, RedisReply* to) {
  switch (from.type) {
    case REDIS_REPLY_ERROR:
      top->is_error = true;
      top->error.assign(from.str, from.len);
      return;
    case REDIS_REPLY_STRING:
      to->type = RedisReply::Type::kString;
      to->str.assign(from.str, from.len);
      return;
    case REDIS_REPLY_STATUS:
      to->type = RedisReply::Type::kStatus;
      to->str.assign(from.str, from.len);
      return;
    case REDIS_REPLY_INTEGER:
      to->type = RedisReply::Type::kInteger;
      to->integer = from.integer;
      return;
    case REDIS_REPLY_ARRAY:
      to->type = RedisReply::Type::kArray;
      to->elements.resize(from.elements);
      for (size_t i = 0; i < from.elements; ++i) convert_reply(*from.element[i], top, &to->elements[i]);
      return;
    default:
      to->type = RedisReply::Type::kNil;
  }
}

// Connects one resolved address before `deadline`; the socket is non-blocking.
absl::StatusOr<int> connect_address(const addrinfo& address, const std::string& peer,
                                    RedisClock::time_point deadline) {
  const int fd = ::socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket() for redis ", peer, ": ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, address.ai_addr, address.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to redis ", peer, ": ", std::strerror(error)));
  }
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - RedisClock::now()).count();
    if (left <= 0) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("connecting to redis ", peer, " timed out"));
    }
    pollfd entry{fd, POLLOUT, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0) break;
  }
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  if (error != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to redis ", peer, ": ", std::strerror(error)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::shared_ptr<RedisTlsContext>> RedisTlsContext::create(const RedisOptions& options) {
  if (options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError("redis TLS needs a CA file (tls_ca_file) to verify the server against");
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed: " + openssl_error_text());
  std::shared_ptr<RedisTlsContext> context(new RedisTlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // Partial writes: write_all() resumes after a WANT_WRITE with what is left.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_load_verify_locations(ctx, options.tls_ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load redis TLS CA file '", options.tls_ca_file, "': ", openssl_error_text()));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("redis TLS client certificate and key come together: set both or neither");
  }
  if (!options.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.tls_cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, options.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("cannot load redis TLS client certificate '",
                                                     options.tls_cert_file, "' / key '", options.tls_key_file,
                                                     "': ", openssl_error_text()));
    }
  }
  return context;
}

RedisTlsContext::~RedisTlsContext() { SSL_CTX_free(ctx_); }

RedisConnection::RedisConnection(int fd, std::string peer, uint64_t max_reply_bytes)
    : fd_(fd),
      reader_(redisReaderCreateWithFunctions(
          const_cast<redisReplyObjectFunctions*>(&capped_reply_functions().functions))),
      peer_(std::move(peer)),
      max_reply_bytes_(max_reply_bytes) {
  reader_limits_.max_elements = max_reply_bytes / 3;
  if (reader_ != nullptr) reader_->privdata = &reader_limits_;
}

RedisConnection::~RedisConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: the socket closes under it anyway
  if (reader_ != nullptr) redisReaderFree(reader_);
  ::close(fd_);
}

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::open(const RedisEndpoint& endpoint,
                                                                      const RedisOptions& options,
                                                                      const std::shared_ptr<RedisTlsContext>& tls,
                                                                      RedisClock::time_point connect_deadline) {
  const std::string peer = absl::StrCat(endpoint.host, ":", endpoint.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  // getaddrinfo has no deadline; the tier's addresses are IPs or cluster-local names.
  const std::string port = std::to_string(endpoint.port);
  if (const int error = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &addresses); error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve redis host ", peer, ": ", gai_strerror(error)));
  }
  absl::StatusOr<int> fd = absl::UnavailableError(absl::StrCat("redis host ", peer, " has no address"));
  for (const addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
    fd = connect_address(*address, peer, connect_deadline);
    if (fd.ok() || absl::IsDeadlineExceeded(fd.status())) break;
  }
  ::freeaddrinfo(addresses);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RedisConnection> connection(new RedisConnection(*fd, peer, options.max_reply_bytes));
  if (connection->reader_ == nullptr) return absl::ResourceExhaustedError("redisReaderCreate failed");
  if (tls != nullptr) {
    if (absl::Status status = connection->handshake_tls(tls->get(), endpoint.host, connect_deadline); !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = connection->authenticate(options, connect_deadline); !status.ok()) return status;
  return connection;
}

absl::Status RedisConnection::handshake_tls(SSL_CTX* ctx, const std::string& host, RedisClock::time_point deadline) {
  ssl_ = SSL_new(ctx);
  BIO* bio = ssl_ != nullptr ? BIO_new(socket_bio_without_sigpipe()) : nullptr;
  if (bio == nullptr) return absl::InternalError("cannot set up TLS for redis " + peer_ + ": " + openssl_error_text());
  BIO_set_fd(bio, fd_, BIO_NOCLOSE);  // the connection closes fd_ itself
  SSL_set_bio(ssl_, bio, bio);
  // The certificate must name the host we dialed: an IP in its SANs for an
  // IP, else the DNS name (also sent as SNI).
  if (is_ip_literal(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, host.c_str());
    SSL_set1_host(ssl_, host.c_str());
  }
  while (true) {
    ERR_clear_error();
    const int result = SSL_connect(ssl_);
    if (result == 1) return absl::OkStatus();
    const int error = SSL_get_error(ssl_, result);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (absl::Status status = wait(error == SSL_ERROR_WANT_READ, deadline, "TLS handshake"); !status.ok()) {
        return status;
      }
      continue;
    }
    const long verify = SSL_get_verify_result(ssl_);
    std::string reason = openssl_error_text();
    if (verify != X509_V_OK) reason = absl::StrCat("certificate check failed: ", X509_verify_cert_error_string(verify));
    if (reason.empty()) reason = error == SSL_ERROR_SYSCALL ? "the server closed the connection" : "unknown error";
    return fail(absl::UnavailableError(absl::StrCat("TLS handshake with redis ", peer_, " failed: ", reason)));
  }
}

absl::Status RedisConnection::authenticate(const RedisOptions& options, RedisClock::time_point deadline) {
  if (options.password.empty()) return absl::OkStatus();
  std::vector<std::string_view> argv = {"AUTH"};
  if (!options.username.empty()) argv.push_back(options.username);
  argv.push_back(options.password);
  absl::StatusOr<RedisConnectionReply> reply = execute(argv, deadline);
  if (!reply.ok()) return reply.status();
  if (reply->is_error) {
    return absl::PermissionDeniedError(absl::StrCat("redis ", peer_, " refused AUTH",
                                                    options.username.empty() ? "" : " as user '" + options.username + "'",
                                                    ": ", reply->error));
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisConnectionReply> RedisConnection::execute(std::span<const std::string_view> argv,
                                                             RedisClock::time_point deadline) {
  if (broken_) return absl::FailedPreconditionError("redis connection to " + peer_ + " is broken");
  std::vector<const char*> pointers;
  std::vector<size_t> lengths;
  for (std::string_view arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* formatted = nullptr;
  const int length = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), pointers.data(), lengths.data());
  if (length < 0) return absl::ResourceExhaustedError("cannot format a redis command (out of memory)");
  const std::string_view bytes(formatted, static_cast<size_t>(length));
  absl::Status written = write_all(bytes, deadline);
  redisFreeCommand(formatted);
  if (!written.ok()) return written;
  return read_reply(deadline);
}

absl::StatusOr<RedisConnectionReply> RedisConnection::read_reply(RedisClock::time_point deadline) {
  // The cap is checked on bytes as they are fed to the reader, before it
  // allocates anything for them: a reply announcing a 4 GiB bulk costs us
  // at most max_reply_bytes plus one read chunk.
  uint64_t fed_bytes = 0;
  std::vector<char> buffer(kReadChunkBytes);
  while (true) {
    void* object = nullptr;
    if (redisReaderGetReply(reader_, &object) != REDIS_OK) {
      if (reader_limits_.refused) {
        return fail(absl::ResourceExhaustedError(
            absl::StrCat("reply from redis ", peer_, " announces an array of more elements than max_reply_bytes (",
                         max_reply_bytes_, " bytes) can hold; connection dropped")));
      }
      return fail(absl::InternalError(
          absl::StrCat("protocol error from redis ", peer_, ": ", redisReaderGetError(reader_))));
    }
    if (object != nullptr) {
      RedisConnectionReply reply;
      convert_reply(*static_cast<redisReply*>(object), &reply, &reply.reply);
      freeReplyObject(object);
      return reply;
    }
    // Never read past one byte over the cap: that byte proves the reply is too big.
    const uint64_t left = max_reply_bytes_ - fed_bytes;
    const size_t want = left >= buffer.size() ? buffer.size() : static_cast<size_t>(left) + 1;
    absl::StatusOr<size_t> got = read_some(buffer.data(), want, deadline);
    if (!got.ok()) return got.status();
    fed_bytes += *got;
    if (fed_bytes > max_reply_bytes_) {
      return fail(absl::ResourceExhaustedError(absl::StrCat("reply from redis ", peer_, " exceeds max_reply_bytes (",
                                                            max_reply_bytes_, " bytes); connection dropped")));
    }
    if (redisReaderFeed(reader_, buffer.data(), *got) != REDIS_OK) {
      return fail(absl::ResourceExhaustedError("redis reader out of memory reading from " + peer_));
    }
  }
}

absl::Status RedisConnection::write_all(std::string_view bytes, RedisClock::time_point deadline) {
  while (!bytes.empty()) {
    const size_t chunk = std::min<size_t>(bytes.size(), 1 << 30);
    ssize_t sent;
    bool want_read = false;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int result = SSL_write(ssl_, bytes.data(), static_cast<int>(chunk));
      sent = result;
      if (result <= 0) {
        const int error = SSL_get_error(ssl_, result);
        if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
          return fail(absl::UnavailableError(
              absl::StrCat("TLS write to redis ", peer_, " failed: ", openssl_error_text(), " ", std::strerror(errno))));
        }
        want_read = error == SSL_ERROR_WANT_READ;
      }
    } else {
      sent = ::send(fd_, bytes.data(), chunk, MSG_NOSIGNAL);
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail(absl::UnavailableError(absl::StrCat("write to redis ", peer_, " failed: ", std::strerror(errno))));
      }
    }
    if (sent > 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    if (absl::Status status = wait(want_read, deadline, "writing a command"); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RedisConnection::read_some(char* buffer, size_t capacity, RedisClock::time_point deadline) {
  while (true) {
    bool want_write = false;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int result = SSL_read(ssl_, buffer, static_cast<int>(std::min<size_t>(capacity, 1 << 30)));
      if (result > 0) return static_cast<size_t>(result);
      const int error = SSL_get_error(ssl_, result);
      if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && result == 0)) {
        return fail(absl::UnavailableError("redis " + peer_ + " closed the connection"));
      }
      if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
        return fail(absl::UnavailableError(
            absl::StrCat("TLS read from redis ", peer_, " failed: ", openssl_error_text(), " ", std::strerror(errno))));
      }
      want_write = error == SSL_ERROR_WANT_WRITE;
    } else {
      const ssize_t got = ::recv(fd_, buffer, capacity, 0);
      if (got > 0) return static_cast<size_t>(got);
      if (got == 0) return fail(absl::UnavailableError("redis " + peer_ + " closed the connection"));
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail(absl::UnavailableError(absl::StrCat("read from redis ", peer_, " failed: ", std::strerror(errno))));
      }
    }
    if (absl::Status status = wait(!want_write, deadline, "reading a reply"); !status.ok()) return status;
  }
}

absl::Status RedisConnection::wait(bool for_read, RedisClock::time_point deadline, std::string_view what) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - RedisClock::now()).count();
    if (left <= 0) {
      return fail(absl::DeadlineExceededError(absl::StrCat("redis ", peer_, " timed out ", av(what))));
    }
    pollfd entry{fd_, static_cast<short>(for_read ? POLLIN : POLLOUT), 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (ready > 0) return absl::OkStatus();  // also on POLLERR/POLLHUP: the next call reports it
    if (ready < 0 && errno != EINTR) {
      return fail(absl::UnavailableError(absl::StrCat("poll on redis ", peer_, " failed: ", std::strerror(errno))));
    }
  }
}

absl::Status RedisConnection::fail(absl::Status status) {
  broken_ = true;
  return status;
}

bool RedisConnection::idle_and_usable() const {
  if (broken_) return false;
  if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return false;
  pollfd entry{fd_, POLLIN, 0};
  // Readable while idle: the server closed it (EOF) or sent something we
  // did not ask for; either way the stream is not ours to reuse.
  return ::poll(&entry, 1, 0) == 0;
}

}  // namespace baton
