// Who owns a session on the edge agent (--api-key-file).
//
// Every call but Health presents an API key (gRPC metadata or HTTP header
// "authorization: Bearer KEY"); the key's owner tag (api_key_owner_tag,
// "o" + 16 hex digits of a SHA-256, never the key) prefixes the ids of the
// sessions that call creates and uses: the client's "chat-1" is stored as
// "o0123456789abcdef.chat-1". So two keys never share a session (the same
// client id names two sessions), another key's sessions are NOT_FOUND in
// Generate, ListSessions and DeleteSession, and the owner persists with the
// session's id in its file, across restarts. Without keys the owner is empty
// and ids are stored as given (loopback dev mode, as before keys existed).
#pragma once

#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/rpc/api_keys.h"

namespace baton {

// The owner tag of the call's key; "" when `keys` is null (no keys: no
// authentication). UNAUTHENTICATED for a missing or wrong key.
absl::StatusOr<std::string> authenticate_call(const ApiKeySet* keys, const grpc::ServerContextBase& context);

// The stored id of the client's `session_id` for `owner` (unchanged when
// either is empty).
std::string owned_session_id(const std::string& owner, const std::string& session_id);

// The client's id of a stored session when `owner` owns it; nullopt when it
// is another owner's. Without an owner every stored id is returned as is.
std::optional<std::string> client_session_id(const std::string& owner, const std::string& stored_id);

}  // namespace baton
