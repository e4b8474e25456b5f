// AtomicFile: a file that appears complete or not at all, for every file
// Baton writes (sessions, prefix packs, the cloud session secret, GGUF
// models). Bytes go to "<path>.tmp.<pid>.<n>" in the target's directory;
// commit() flushes, fsyncs it, renames it onto `path` and fsyncs the
// directory. Destroyed without commit() (or after a failed one) the temp file
// is removed, so `path` holds either its old content or the whole new one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

// What comes between the target's name and "<pid>.<n>" in a temp name; the
// stores recognise (and remove) interrupted writes by it.
inline constexpr std::string_view kAtomicFileTempInfix = ".tmp.";

enum class AtomicFileMode {
  kOwnerOnly,  // 0600 whatever the umask: sessions, packs, secrets
  kShared,     // 0666 less the umask, as any new file: models
};

class AtomicFile {
 public:
  // Errors (errno_status) name the temp path: "creating PATH.tmp.P.N: ...".
  static absl::StatusOr<std::unique_ptr<AtomicFile>> create(const std::string& path,
                                                            AtomicFileMode mode = AtomicFileMode::kOwnerOnly);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Buffered (1 MiB; larger writes go straight to the file); the first error
  // sticks and every later call returns it.
  absl::Status write(std::string_view bytes);
  // Flush, fsync, close, rename onto the target, fsync of the directory (a
  // failure of that last one is ignored: the complete file is in place).
  absl::Status commit();
  uint64_t bytes() const { return bytes_; }  // written to the temp file so far
  const std::string& temp_path() const { return temp_path_; }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;

  AtomicFile(std::string path, std::string temp_path, int fd);
  absl::Status flush();
  absl::Status write_fd(std::string_view bytes);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t bytes_ = 0;
  bool committed_ = false;
  absl::Status error_;
};

// `bytes` as the whole content of `path`, through an AtomicFile.
absl::Status write_file_atomically(const std::string& path, std::string_view bytes,
                                   AtomicFileMode mode = AtomicFileMode::kOwnerOnly);

// For tests: the fsync and rename calls commit() makes, so a test can count
// them or make one fail. set_* returns the calls it replaces.
struct AtomicFileSyscalls {
  int (*fsync)(int fd);
  int (*rename)(const char* from, const char* to);
};
AtomicFileSyscalls set_atomic_file_syscalls_for_testing(AtomicFileSyscalls calls);

}  // namespace baton
