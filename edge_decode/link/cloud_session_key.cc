#include "edge_decode/link/cloud_session_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/atomic_file.h"
#include "common/util/errno_status.h"
#include "common/util/hmac.h"

namespace baton {
namespace {

absl::StatusOr<std::string> random_secret() {
  std::string secret(kCloudSessionSecretBytes, '\0');
  size_t filled = 0;
  while (filled < secret.size()) {
    const ssize_t n = ::getrandom(secret.data() + filled, secret.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "getrandom for the cloud session secret");
    }
    filled += static_cast<size_t>(n);
  }
  return secret;
}

absl::StatusOr<std::string> read_secret(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno_status(errno, "opening " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return errno_status(error, "stat " + path);
  }
  if (!S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kCloudSessionSecretBytes) ||
      (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s must be a regular file of %d bytes that only its owner may read (mode 0600); it is %d bytes, mode "
        "%04o. Fix its mode, or delete it to draw a new secret (the cloud then recomputes each session once)",
        path, kCloudSessionSecretBytes, static_cast<long long>(st.st_size), st.st_mode & 07777));
  }
  std::string secret(kCloudSessionSecretBytes, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::read(fd, secret.data() + got, secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      return errno_status(error, "reading " + path);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return secret;
}

}  // namespace

absl::StatusOr<CloudSessionKeys> CloudSessionKeys::Ephemeral() {
  absl::StatusOr<std::string> secret = random_secret();
  if (!secret.ok()) return secret.status();
  return CloudSessionKeys(std::move(*secret));
}

absl::StatusOr<CloudSessionKeys> CloudSessionKeys::Persistent(const std::string& path) {
  absl::StatusOr<std::string> secret = read_secret(path);
  if (secret.ok()) return CloudSessionKeys(std::move(*secret));
  if (!absl::IsNotFound(secret.status())) return secret.status();
  secret = random_secret();
  if (!secret.ok()) return secret.status();
    // Temp file (0600), fsync, rename, fsync of the directory (atomic_file.h).
  if (absl::Status written = write_file_atomically(path, *secret); !written.ok()) return written;
  return CloudSessionKeys(std::move(*secret));
}

std::string CloudSessionKeys::key_for(const std::string& session_id, int64_t created_unix_ms) const {
  // Length-prefixed parts: no two (id, time) pairs share a message.
  const std::string message =
      absl::StrCat("baton-cloud-session/1\n", session_id.size(), ":", session_id, "\n", created_unix_ms);
  return to_hex(hmac_sha256(secret_, message));
}

}  // namespace baton
