// Is an address on this machine? Decides where plaintext is acceptable (a KV
// cache is as sensitive as the prompt it came from) and where a listener may
// run without authentication. Only literals count: a name such as
// "127.attacker.example" resolves wherever its owner wants.
#pragma once

#include <string_view>

namespace baton {

// True for IPv4 literals in 127.0.0.0/8 (dotted quad, as inet_pton reads
// them), the IPv6 loopback ::1 (with or without brackets; also the
// IPv4-mapped ::ffff:127.x.y.z), and the name "localhost" (any case). False
// for everything else: other names, wildcard addresses (0.0.0.0, ::), other
// IPs, the empty string.
bool is_loopback_host(std::string_view host);

}  // namespace baton
