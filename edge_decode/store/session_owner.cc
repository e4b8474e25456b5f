#include "edge_decode/store/session_owner.h"

#include <string_view>

namespace baton {

absl::StatusOr<std::string> authenticate_call(const ApiKeySet* keys, const grpc::ServerContextBase& context) {
  if (keys == nullptr) return std::string();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing API key: send the metadata 'authorization: Bearer KEY'");
  }
  const std::optional<std::string_view> token =
      bearer_token(std::string_view(it->second.data(), it->second.size()));
  if (!token.has_value()) {
    return absl::UnauthenticatedError("the 'authorization' metadata is not 'Bearer KEY'");
  }
  std::optional<std::string> owner = keys->match(*token);
  if (!owner.has_value()) return absl::UnauthenticatedError("invalid API key");
  return *owner;
}

std::string owned_session_id(const std::string& owner, const std::string& session_id) {
  if (owner.empty() || session_id.empty()) return session_id;
  return owner + "." + session_id;
}

std::optional<std::string> client_session_id(const std::string& owner, const std::string& stored_id) {
  if (owner.empty()) return stored_id;
  const std::string prefix = owner + ".";
  if (stored_id.size() <= prefix.size() || stored_id.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return stored_id.substr(prefix.size());
}

}  // namespace baton
