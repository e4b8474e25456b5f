#include "common/rpc/api_keys.h"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/errno_status.h"
#include "common/util/sha256.h"

namespace baton {
namespace {

absl::Status check_key(std::string_view key, const std::string& where) {
  if (key.size() < kMinApiKeyChars) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the key has %d characters; at least %d are needed", where,
                                                      key.size(), kMinApiKeyChars));
  }
  for (char c : key) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the key holds a space or a character outside printable ASCII"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string api_key_owner_tag(std::string_view key) {
  Sha256 hash;
  hash.update(std::string_view("baton api key\0", 14));
  hash.update(key);
  return "o" + to_hex(hash.finish()).substr(0, 16);
}

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(absl::string_view(authorization.data(), kScheme.size()),
                              absl::string_view(kScheme.data(), kScheme.size()))) {
    return std::nullopt;
  }
  const absl::string_view token = absl::StripAsciiWhitespace(
      absl::string_view(authorization.data() + kScheme.size(), authorization.size() - kScheme.size()));
  return std::string_view(token.data(), token.size());
}

absl::StatusOr<ApiKeySet> ApiKeySet::FromKeys(const std::vector<std::string>& keys) {
  ApiKeySet set;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status valid = check_key(keys[i], absl::StrCat("key ", i + 1)); !valid.ok()) return valid;
    set.keys_.push_back({keys[i], api_key_owner_tag(keys[i])});
  }
  if (set.keys_.empty()) return absl::InvalidArgumentError("no API keys given");
  return set;
}

absl::StatusOr<ApiKeySet> ApiKeySet::LoadFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno_status(errno, absl::StrCat("API key file ", path));
  if ((info.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "API key file %s has mode %04o: group or others can read it; run `chmod 600 %s`", path,
        info.st_mode & 07777, path));
  }
  std::ifstream in(path);
  if (!in) return errno_status(errno, absl::StrCat("API key file ", path));
  ApiKeySet set;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    const std::string_view key(stripped.data(), stripped.size());
    if (key.empty() || key.front() == '#') continue;
    if (absl::Status valid = check_key(key, absl::StrCat(path, ":", line_number)); !valid.ok()) return valid;
    set.keys_.push_back({std::string(key), api_key_owner_tag(key)});
  }
  if (set.keys_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("API key file ", path, " holds no key (one per line; '#' comments)"));
  }
  return set;
}

std::optional<std::string> ApiKeySet::match(std::string_view presented) const {
  // Every key is compared (no early exit), so the time does not say which matched.
  const Key* found = nullptr;
  for (const Key& key : keys_) {
    if (constant_time_equal(presented, key.secret)) found = &key;
  }
  if (found == nullptr) return std::nullopt;
  return found->owner;
}

}  // namespace baton
