#include "edge_decode/store/session.h"

namespace baton {

bool is_valid_session_id(const std::string& id, size_t max_chars) {
  if (id.empty() || id.size() > max_chars || id == "." || id == "..") return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace baton
