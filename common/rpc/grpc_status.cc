#include "common/rpc/grpc_status.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace baton {

grpc::Status to_grpc_status(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status from_grpc_status(const grpc::Status& status, absl::string_view prefix) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), absl::StrCat(prefix, status.error_message()));
}

void add_retry_after(grpc::ServerContextBase& context, uint32_t retry_after_ms) {
  context.AddTrailingMetadata(kRetryAfterMetadataKey, std::to_string(retry_after_ms));
}

std::optional<uint32_t> parse_retry_after_ms(std::string_view value) {
  // SimpleAtoi takes a sign and surrounding blanks; a hint is digits only.
  if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  uint32_t ms = 0;
  if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &ms)) return std::nullopt;  // over UINT32_MAX
  return ms;
}

std::optional<uint32_t> trailing_retry_after_ms(const grpc::ClientContext& context) {
  const auto& trailing = context.GetServerTrailingMetadata();
  const auto it = trailing.find(kRetryAfterMetadataKey);
  if (it == trailing.end()) return std::nullopt;
  return parse_retry_after_ms(std::string_view(it->second.data(), it->second.size()));
}

}  // namespace baton
