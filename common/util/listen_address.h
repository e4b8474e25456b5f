// Listening addresses of every Baton server (baton-edge --listen, --http,
// --metrics; baton-prefill --listen, --metrics): one parse, one set of socket
// options, one error when a port cannot be bound.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

// A port alone means loopback: "8080" and ":8080" -> "127.0.0.1:8080", so the
// short form never exposes a listener beyond this machine. Anything else
// ("host:port", "[::1]:port", "") comes back unchanged.
std::string listen_address_or_loopback(std::string_view address);

// listen_address_or_loopback, then parse_host_port: the host (without
// brackets) and the port (0 = any free port). INVALID_ARGUMENT naming the
// address when it is malformed.
absl::StatusOr<std::pair<std::string, int>> parse_listen_address(std::string_view address);

// Socket options of every HTTP listener (cpp-httplib's set_socket_options):
// SO_REUSEADDR (a restart may bind while old connections sit in TIME_WAIT) and
// never SO_REUSEPORT, which would let a second process bind the same port and
// take part of the traffic.
void set_exclusive_listener_options(int socket_fd);

// Why `host:port` cannot be listened on right now: binds a throwaway TCP
// socket with the listeners' options and returns the OS reason, lower case
// ("address already in use"), or "" when it binds. For the error message after
// a server failed to bind (neither gRPC nor httplib report errno).
std::string bind_failure_reason(const std::string& host, int port);

// UNAVAILABLE "cannot listen on ADDRESS: REASON", one line; REASON from
// bind_failure_reason, or "the port could not be bound" when the probe binds.
absl::Status listen_error(const std::string& address);

}  // namespace baton
