#include "common/util/read_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace baton {

absl::StatusOr<std::string> read_file(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad() || text.bad()) return absl::DataLossError(absl::StrCat("reading ", what, " ", path, " failed"));
  return std::move(text).str();
}

}  // namespace baton
