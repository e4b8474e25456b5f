// The RPC boundary, written once: absl::Status <-> grpc::Status (the codes
// are the same numbers in both), and the retry hint a server sends with
// UNAVAILABLE / RESOURCE_EXHAUSTED as trailing metadata, in milliseconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace baton {

// Trailing metadata key of the retry hint on UNAVAILABLE / RESOURCE_EXHAUSTED.
inline constexpr char kRetryAfterMetadataKey[] = "baton-retry-after-ms";

// Same code, same message.
grpc::Status to_grpc_status(const absl::Status& status);
// Same code; the message is `prefix` + the gRPC message ("cloud: ...").
absl::Status from_grpc_status(const grpc::Status& status, absl::string_view prefix = "");

// Puts the retry hint into the call's trailing metadata (before Finish).
void add_retry_after(grpc::ServerContextBase& context, uint32_t retry_after_ms);
// A hint's value: a whole number of milliseconds; nullopt when it is not one
// (empty, signed, not decimal, over UINT32_MAX).
std::optional<uint32_t> parse_retry_after_ms(std::string_view value);
// The hint of a finished call (after Finish); nullopt when the server sent
// none or one that does not parse.
std::optional<uint32_t> trailing_retry_after_ms(const grpc::ClientContext& context);

}  // namespace baton
