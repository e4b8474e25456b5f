// HMAC-SHA256 (RFC 2104 over common/util/sha256.h): keyed digests for values
// a peer must not be able to compute or invert without the key, e.g. the
// session keys the edge gives the cloud (edge_decode/link/cloud_session_key.h).
#pragma once

#include <string_view>

#include "common/util/sha256.h"

namespace baton {

// HMAC-SHA256(key, message); any key length (keys over 64 bytes are hashed
// first, as RFC 2104 says).
Digest256 hmac_sha256(std::string_view key, std::string_view message);

}  // namespace baton
