// errno -> absl::Status for file I/O, one mapping for every file writer and
// reader (pack files, session files, the pack and session stores).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace baton {

// "<what>: <strerror(error)>" with a code a caller can act on: NOT_FOUND
// (ENOENT), PERMISSION_DENIED (EACCES, EPERM), RESOURCE_EXHAUSTED (ENOSPC,
// EDQUOT, EFBIG: disk, quota or file-size limit), else INTERNAL.
absl::Status errno_status(int error, const std::string& what);

}  // namespace baton
