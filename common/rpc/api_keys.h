// ApiKeySet: the API keys a server accepts (baton-edge --api-key-file), and
// the owner tag each key gives the sessions it creates.
//
// Key file: one key per line; blank lines and lines starting with '#' are
// skipped; surrounding whitespace is dropped; each key is at least
// kMinApiKeyChars characters of printable ASCII without spaces. The file must
// not be readable by group or others (mode & 077 == 0), like an ssh key:
// a key file anyone on the box can read is no secret.
//
// Matching compares the presented key with every key in time that does not
// depend on where (or whether) they differ, so response time tells an
// attacker nothing about a key's prefix.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

inline constexpr size_t kMinApiKeyChars = 16;

class ApiKeySet {
 public:
  // Reads `path` (see above). Errors name the file: NOT_FOUND / PERMISSION_DENIED
  // when it cannot be read, FAILED_PRECONDITION for a group/world-readable
  // file (the message gives its mode and `chmod 600`), INVALID_ARGUMENT for a
  // short or malformed key (by line number, never the key) or a file without keys.
  static absl::StatusOr<ApiKeySet> LoadFile(const std::string& path);
  // From keys already in memory (tests); the same per-key checks.
  static absl::StatusOr<ApiKeySet> FromKeys(const std::vector<std::string>& keys);

  // The owner tag of the key that equals `presented`; nullopt when none does.
  std::optional<std::string> match(std::string_view presented) const;
  size_t size() const { return keys_.size(); }

 private:
  struct Key {
    std::string secret;
    std::string owner;  // api_key_owner_tag(secret)
  };
  std::vector<Key> keys_;
};

// The owner tag of a key: "o" + the first 16 hex digits of SHA-256("baton api
// key\0" + key). Stable across restarts (persisted sessions keep their owner)
// and never the key itself; 64 bits keep two keys of one agent apart.
std::string api_key_owner_tag(std::string_view key);

// Equal length and bytes, in time that depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

// The token of an "authorization" value "Bearer TOKEN" (scheme
// case-insensitive); nullopt when the value has another form.
std::optional<std::string_view> bearer_token(std::string_view authorization);

}  // namespace baton
