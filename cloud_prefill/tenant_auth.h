// TenantAuth: bearer tokens mapped to tenants (--auth-tokens FILE). Each
// non-empty line of the file that does not start with '#' is
// "<token> <tenant>" (whitespace separated; tokens of 16+ characters,
// tenants [A-Za-z0-9._-]). Without a file every caller is the tenant
// "default" and no token is needed. Caches and packs are keyed by tenant, so
// a tenant never reads another tenant's KV.
#pragma once

#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class CallbackServerContext;
}

namespace baton {

inline constexpr char kDefaultTenant[] = "default";

class TenantAuth {
 public:
  // No tokens: everyone is kDefaultTenant.
  TenantAuth() = default;
  static absl::StatusOr<TenantAuth> FromFile(const std::string& path);
  static absl::StatusOr<TenantAuth> FromText(const std::string& text, const std::string& source_name);

  bool enabled() const { return !tenants_.empty(); }
  size_t tenant_tokens() const { return tenants_.size(); }
  // Distinct tenants the tokens name (1 without tokens: everyone is kDefaultTenant).
  size_t tenant_count() const;

  // The tenant of the call's "authorization: Bearer <token>" metadata;
  // UNAUTHENTICATED when tokens are configured and it is missing or unknown.
  absl::StatusOr<std::string> authenticate(const grpc::CallbackServerContext& context) const;
  absl::StatusOr<std::string> tenant_of_header(const std::string& authorization) const;

 private:
  std::unordered_map<std::string, std::string> tenants_;  // token -> tenant
};

}  // namespace baton
