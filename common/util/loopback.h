// Whether a host names this machine's loopback interface, decided from the
// text alone (no DNS): IPv4 literals in 127.0.0.0/8, the IPv6 literal ::1
// (bracketed or not) and "localhost". "127.attacker.example" is a name, not
// a literal, and is not loopback; neither is an empty host (the wildcard).
#pragma once

#include <string_view>

namespace baton {

bool is_loopback_host(std::string_view host);

}  // namespace baton
