#include "edge_decode/cloud_session_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// Temp file (0600), fsync, rename, fsync of the directory.
absl::Status write_secret(const std::string& path, const std::string& secret) {
  const std::string temp_path = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno_status(errno, "creating " + temp_path);
  auto fail = [&](const std::string& what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp_path.c_str());
    return errno_status(error, what);
  };
  if (::fchmod(fd, 0600) != 0) return fail("chmod 0600 " + temp_path);  // whatever the umask
  if (::write(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size())) {
    return fail("writing " + temp_path);
  }
  if (::fsync(fd) != 0) return fail("fsync " + temp_path);
  ::close(fd);
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path.c_str());
    return errno_status(error, "renaming " + temp_path + " to " + path);
  }
  const std::string dir = path.rfind('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
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
  if (absl::Status written = write_secret(path, *secret); !written.ok()) return written;
  return CloudSessionKeys(std::move(*secret));
}

std::string CloudSessionKeys::key_for(const std::string& session_id, int64_t created_unix_ms) const {
  // Length-prefixed parts: no two (id, time) pairs share a message.
  const std::string message =
      absl::StrCat("baton-cloud-session/1\n", session_id.size(), ":", session_id, "\n", created_unix_ms);
  return to_hex(hmac_sha256(secret_, message));
}

}  // namespace baton
