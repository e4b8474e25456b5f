#include "common/util/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace baton {

absl::Status errno_status(int error, const std::string& what) {
  const std::string message = absl::StrFormat("%s: %s", what, std::strerror(error));
  switch (error) {
    case ENOENT: return absl::NotFoundError(message);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return absl::ResourceExhaustedError(message);
    default: return absl::InternalError(message);
  }
}

}  // namespace baton
