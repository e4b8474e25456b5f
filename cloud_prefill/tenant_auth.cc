#include "cloud_prefill/tenant_auth.h"

#include <set>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/read_file.h"

namespace baton {
namespace {

bool valid_tenant(const std::string& tenant) {
  if (tenant.empty() || tenant.size() > 128) return false;
  for (char c : tenant) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Constant-time comparison, so response timing does not leak a token prefix.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<TenantAuth> TenantAuth::FromText(const std::string& text, const std::string& source_name) {
  TenantAuth auth;
  std::istringstream lines(text);
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    std::istringstream fields(line);
    std::string token, tenant, extra;
    if (!(fields >> token) || token[0] == '#') continue;
    if (!(fields >> tenant) || (fields >> extra)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: expected '<token> <tenant>'", source_name, line_number));
    }
    if (token.size() < 16) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: token has %d characters; at least 16 are required", source_name, line_number, token.size()));
    }
    if (!valid_tenant(tenant)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: tenant '%s' must be 1..128 characters of [A-Za-z0-9._-]", source_name, line_number, tenant));
    }
    if (!auth.tenants_.emplace(token, tenant).second) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: token listed twice", source_name, line_number));
    }
  }
  if (auth.tenants_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": no '<token> <tenant>' lines"));
  }
  return auth;
}

absl::StatusOr<TenantAuth> TenantAuth::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = read_file(path, "the auth tokens file");
  if (!text.ok()) return text.status();
  return FromText(*text, path);
}

absl::StatusOr<std::string> TenantAuth::tenant_of_header(const std::string& authorization) const {
  if (!enabled()) return std::string(kDefaultTenant);
  constexpr char kPrefix[] = "Bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  if (authorization.rfind(kPrefix, 0) != 0) {
    return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
  }
  const std::string token = authorization.substr(sizeof(kPrefix) - 1);
  const std::string* tenant = nullptr;
  for (const auto& [known, name] : tenants_) {
    if (same_secret(known, token)) tenant = &name;  // no early exit: constant time over the table
  }
  if (tenant == nullptr) return absl::UnauthenticatedError("the bearer token is not valid");
  return *tenant;
}

absl::StatusOr<std::string> TenantAuth::authenticate(const grpc::CallbackServerContext& context) const {
  if (!enabled()) return std::string(kDefaultTenant);
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return tenant_of_header("");
  return tenant_of_header(std::string(it->second.data(), it->second.size()));
}

size_t TenantAuth::tenant_count() const {
  if (tenants_.empty()) return 1;
  std::set<std::string> names;
  for (const auto& [token, tenant] : tenants_) names.insert(tenant);
  return names.size();
}

}  // namespace baton
