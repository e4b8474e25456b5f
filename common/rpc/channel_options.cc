#include "common/rpc/channel_options.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace baton {
namespace {

absl::StatusOr<std::string> read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = read_file(path, flag);
  if (!text.ok()) return text.status();
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (!token.empty() && token.front() != '#') return std::string(token);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
}

absl::StatusOr<ChannelSecurity> make_channel_security(const ChannelSecurityOptions& o) {
  if (o.cert_path.empty() != o.key_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.cert_flag, " and ", o.key_flag, " go together (mutual TLS needs both)"));
  }
  if (!o.cert_path.empty() && o.ca_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.cert_flag, " needs ", o.ca_flag, ": a client certificate is sent over TLS only"));
  }
  ChannelSecurity security;
  if (!o.token_path.empty()) {
    absl::StatusOr<std::string> token = read_token_file(o.token_path, o.token_flag);
    if (!token.ok()) return token.status();
    security.bearer_token = *token;
  }
  if (o.ca_path.empty()) {
    security.credentials = grpc::InsecureChannelCredentials();
    return security;
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> roots = read_file(o.ca_path, o.ca_flag);
  if (!roots.ok()) return roots.status();
  ssl.pem_root_certs = *roots;
  if (!o.cert_path.empty()) {
    absl::StatusOr<std::string> cert = read_file(o.cert_path, o.cert_flag);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = read_file(o.key_path, o.key_flag);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  security.credentials = grpc::SslCredentials(ssl);
  security.tls = true;
  return security;
}

void add_bearer_token(const std::string& token, grpc::ClientContext& context) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace baton
