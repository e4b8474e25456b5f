#include "common/util/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton {

absl::StatusOr<std::string> read_file(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad() || text.bad()) return absl::DataLossError(absl::StrCat("reading ", what, " ", path, " failed"));
  return std::move(text).str();
}

absl::StatusOr<std::string> read_private_file(const std::string& path, absl::string_view what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  // Others may do nothing with it; the group may read it only when it is
  // our own group (a Kubernetes Secret is mounted root:fsGroup 0440, and the
  // pod runs with that group: nobody else gains anything).
  const bool others = (info.st_mode & 007) != 0;
  const bool group = (info.st_mode & 070) != 0 && ((info.st_mode & 030) != 0 || info.st_gid != ::getegid());
  if (others || group) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s has mode %04o: %s can read it; run `chmod 600 %s`", what, path, info.st_mode & 07777,
        others ? "others" : "a group other than this process's", path));
  }
  return read_file(path, what);
}

}  // namespace baton
