#include "common/rpc/server_credentials.h"

#include "absl/strings/str_cat.h"
#include "common/util/read_file.h"

namespace baton {

absl::StatusOr<std::string> read_pem_file(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = read_file(path, absl::StrCat("the ", what));
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, " (", what, ") is not PEM"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const ServerTlsOptions& tls) {
  if (tls.cert_path.empty()) {
    if (!tls.key_path.empty() || !tls.client_ca_path.empty()) {
      return absl::InvalidArgumentError("a TLS key or client CA was given without a certificate (--tls-cert)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_path.empty()) return absl::InvalidArgumentError("--tls-cert needs --tls-key");
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = read_pem_file(tls.cert_path, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = read_pem_file(tls.key_path, "TLS key");
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.client_ca_path.empty()) {
    absl::StatusOr<std::string> roots = read_pem_file(tls.client_ca_path, "client CA");
    if (!roots.ok()) return roots.status();
    options.pem_root_certs = *roots;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace baton
