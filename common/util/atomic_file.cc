#include "common/util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "common/util/check.h"
#include "common/util/errno_status.h"

namespace baton {
namespace {

std::atomic<int (*)(int)> g_fsync{&::fsync};
std::atomic<int (*)(const char*, const char*)> g_rename{&std::rename};

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFileSyscalls set_atomic_file_syscalls_for_testing(AtomicFileSyscalls calls) {
  return AtomicFileSyscalls{g_fsync.exchange(calls.fsync), g_rename.exchange(calls.rename)};
}

AtomicFile::AtomicFile(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path, AtomicFileMode mode) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp_path = absl::StrFormat("%s%s%d.%u", path, std::string(kAtomicFileTempInfix),
                                                static_cast<int>(getpid()), counter++);
  const bool owner_only = mode == AtomicFileMode::kOwnerOnly;
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, owner_only ? 0600 : 0666);
  if (fd < 0) return errno_status(errno, "creating " + temp_path);
  std::unique_ptr<AtomicFile> file(new AtomicFile(path, temp_path, fd));
  if (owner_only && ::fchmod(fd, 0600) != 0) {  // whatever the umask
    return errno_status(errno, "chmod 0600 " + temp_path);
  }
  return file;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

absl::Status AtomicFile::write(std::string_view bytes) {
  if (!error_.ok()) return error_;
  if (bytes.size() >= kFlushBytes) {  // large (a model's tensor): no copy into the buffer
    BATON_RETURN_IF_ERROR(flush());
    return write_fd(bytes);
  }
  buffer_.append(bytes);
  if (buffer_.size() >= kFlushBytes) return flush();
  return absl::OkStatus();
}

absl::Status AtomicFile::flush() {
  BATON_RETURN_IF_ERROR(write_fd(buffer_));
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status AtomicFile::write_fd(std::string_view bytes) {
  if (!error_.ok()) return error_;
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return error_ = errno_status(errno, "writing " + temp_path_);
    p += n;
    left -= static_cast<size_t>(n);
    bytes_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::commit() {
  if (committed_) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(flush());
  if (g_fsync.load()(fd_) != 0) return error_ = errno_status(errno, "fsync " + temp_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return error_ = errno_status(errno, "closing " + temp_path_);
  if (g_rename.load()(temp_path_.c_str(), path_.c_str()) != 0) {
    return error_ = errno_status(errno, "renaming " + temp_path_ + " to " + path_);
  }
  committed_ = true;
  // Makes the rename durable; on failure the complete file is in place anyway.
  const int dir_fd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    g_fsync.load()(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status write_file_atomically(const std::string& path, std::string_view bytes, AtomicFileMode mode) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::create(path, mode));
  BATON_RETURN_IF_ERROR(file->write(bytes));
  return file->commit();
}

}  // namespace baton
