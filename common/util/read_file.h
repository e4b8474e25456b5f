// Reading a whole small file (keys, certificates, token and config files)
// into memory, with one error shape that names the file.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton {

// The bytes of `path`. NOT_FOUND "cannot read WHAT PATH" when it cannot be
// opened (`what` says which file it is: "the TLS key", "--prompt-file");
// DATA_LOSS "reading WHAT PATH failed" when it opens but a read fails (a
// directory, an I/O error).
absl::StatusOr<std::string> read_file(const std::string& path, absl::string_view what);

// read_file for a secret (a password file): FAILED_PRECONDITION, giving the
// mode and `chmod 600`, when others have any access (mode & 007), or its
// group does and that group is not this process's effective group (or may
// write or run it): like an ssh key, except that 0440 root:OURGROUP, how
// Kubernetes mounts a Secret for a pod's fsGroup, is accepted. NOT_FOUND
// when it cannot be stat'ed.
absl::StatusOr<std::string> read_private_file(const std::string& path, absl::string_view what);

}  // namespace baton
