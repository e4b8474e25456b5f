#include "kv_codec_list.h"

#include <algorithm>

namespace baton::cli {

std::string expand_codec_list(const std::string& pattern, int head_dim) {
  const int group = std::min(32, head_dim);
  std::string list = pattern;
  for (size_t at = list.find("gG2"); at != std::string::npos; at = list.find("gG2")) {
    list.replace(at, 3, "g" + std::to_string(2 * group));
  }
  for (size_t at = list.find("gG"); at != std::string::npos; at = list.find("gG")) {
    list.replace(at, 2, "g" + std::to_string(group));
  }
  return list;
}

}  // namespace baton::cli
