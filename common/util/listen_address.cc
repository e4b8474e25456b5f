#include "common/util/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/util/flags.h"

namespace baton {

std::string listen_address_or_loopback(std::string_view address) {
  if (address.empty()) return std::string(address);
  if (address.find(':') == std::string_view::npos) return "127.0.0.1:" + std::string(address);
  if (address.front() == ':') return "127.0.0.1" + std::string(address);
  return std::string(address);
}

absl::StatusOr<std::pair<std::string, int>> parse_listen_address(std::string_view address) {
  return parse_host_port(listen_address_or_loopback(address));
}

void set_exclusive_listener_options(int socket_fd) {
  int yes = 1;
  setsockopt(socket_fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  int no = 0;
  setsockopt(socket_fd, SOL_SOCKET, SO_REUSEPORT, &no, sizeof(no));
}

namespace {

std::string lower_first(std::string text) {
  if (!text.empty()) text[0] = absl::ascii_tolower(static_cast<unsigned char>(text[0]));
  return text;
}

}  // namespace

std::string bind_failure_reason(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* results = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &results); rc != 0) {
    return lower_first(gai_strerror(rc));
  }
  std::string reason;
  // Every address the name resolves to: gRPC listens on all of them.
  for (addrinfo* result = results; result != nullptr && reason.empty(); result = result->ai_next) {
    const int fd = socket(result->ai_family, result->ai_socktype | SOCK_CLOEXEC, result->ai_protocol);
    if (fd < 0) {
      reason = lower_first(std::strerror(errno));
      break;
    }
    set_exclusive_listener_options(fd);
    if (bind(fd, result->ai_addr, result->ai_addrlen) != 0) reason = lower_first(std::strerror(errno));
    close(fd);
  }
  freeaddrinfo(results);
  return reason;
}

absl::Status listen_error(const std::string& address) {
  std::string reason;
  if (absl::StatusOr<std::pair<std::string, int>> parsed = parse_listen_address(address); !parsed.ok()) {
    reason = std::string(parsed.status().message());
  } else {
    reason = bind_failure_reason(parsed->first, parsed->second);
  }
  if (reason.empty()) reason = "the port could not be bound";
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", reason));
}

}  // namespace baton
