// cache_salt (PrefillRequest.cache_salt, GenerateRequest.cache_salt, the
// OpenAI API's "cache_salt"): partitions the cloud's prefix cache within a
// tenant, as vLLM's cache_salt does. One limit for every front end.
#pragma once

#include <cstddef>

namespace baton {

inline constexpr size_t kMaxCacheSaltBytes = 256;

}  // namespace baton
