#include "common/util/loopback.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/match.h"

namespace baton {

bool is_loopback_host(std::string_view host) {
  if (absl::EqualsIgnoreCase(absl::string_view(host.data(), host.size()), "localhost")) return true;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace baton
